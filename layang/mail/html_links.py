"""The links of an HTML document as a browser follows them, and rewriting them in place.

A link's target is read as the HTML Living Standard says: the ``href`` attribute's value is
decoded by the tokenizer's rules for attributes (the named character reference state: a legacy
entity name without ``;`` followed by ``=`` or an alphanumeric stays literal, so ``&timestamp=``
is not ``&times;`` and ``tamp=``), by lexbor, the HTML5 parser behind selectolax; the value is
then parsed as a URL by the WHATWG URL Standard (ada), as a browser does before following it.
Rewriting replaces the bytes of the chosen ``href`` values only; everything else in the
document stays byte for byte.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser

import ada_url
from selectolax.lexbor import LexborHTMLParser

# One attribute in a start tag, by the tokenizer's states from "before attribute name" on: the
# name runs to whitespace, "/", ">" or "=" (a leading "=" belongs to the name), the value is
# quoted or runs to whitespace or ">".
_ATTRIBUTE = re.compile(
    r"""[\s/]*(?P<name>=?[^\s/>=]*)(?:\s*=\s*(?P<value>"[^"]*"|'[^']*'|[^\s>]*))?"""
)
_TAG_NAME = re.compile(r"<[^\s/>]+")
_LINK_TAGS = frozenset({"a", "area"})


@dataclass(frozen=True, slots=True)
class Link:
    """One ``<a>`` or ``<area>`` with an ``href``: its decoded attributes (first of each name
    wins, as in HTML) and the ``href`` as the browser resolves it, ``None`` when it is not an
    absolute URL (relative, ``#fragment``, unparseable)."""

    attributes: dict[str, str]
    href: str
    url: str | None


def attribute_value(raw: str) -> str:
    """An attribute's value as an HTML5 tokenizer decodes it; ``raw`` is the value as written,
    with its quotes if it had them."""
    quote = raw[:1] if raw[:1] in ("'", '"') else '"'
    if raw[:1] in ("'", '"'):
        raw = raw[1:-1]
    node = LexborHTMLParser(f"<a v={quote}{raw}{quote}>").css_first("a")
    return node.attributes.get("v") or ""


def browser_url(href: str) -> str | None:
    """``href`` parsed as an absolute URL by the WHATWG URL Standard (leading and trailing
    spaces and controls dropped, tabs and newlines removed, host lower-cased and IDNA-mapped,
    path and query percent-encoded where the standard says), or ``None`` if it is not one."""
    try:
        return ada_url.URL(href).href
    except ValueError:
        return None


class _StartTags(HTMLParser):
    """Where each ``<a>``/``<area>`` start tag is, skipping comments, scripts and styles."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[tuple[int, int], str]] = []

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag in _LINK_TAGS:
            text = self.get_starttag_text()
            if text is not None:
                self.found.append((self.getpos(), text))

    handle_startendtag = handle_starttag


def rewrite_links(document: str, rewrite: Callable[[Link], str | None]) -> str:
    """``document`` with the ``href`` of each link for which ``rewrite`` gives a new URL set to
    that URL (attribute-escaped, double-quoted); the links it answers ``None`` for, and every
    byte outside the rewritten values, are unchanged."""
    reader = _StartTags()
    reader.feed(document)
    reader.close()
    line_starts = [0]
    for match in re.finditer("\n", document):
        line_starts.append(match.end())
    pieces: list[str] = []
    done = 0
    for (line, column), text in reader.found:
        start = line_starts[line - 1] + column
        if document[start : start + len(text)] != text:
            continue  # not where the parser says: leave it rather than guess
        span = _href_span(text)
        if span is None:
            continue
        attributes, (value_start, value_end) = span
        href = attributes["href"]
        new = rewrite(Link(attributes, href, browser_url(href)))
        if new is None:
            continue
        pieces.append(document[done : start + value_start])
        pieces.append('"' + html.escape(new, quote=True) + '"')
        done = start + value_end
    pieces.append(document[done:])
    return "".join(pieces)


def _href_span(tag: str) -> tuple[dict[str, str], tuple[int, int]] | None:
    """A start tag's decoded attributes and where its (first) ``href`` value is, or ``None``
    when it has no ``href`` with a value."""
    name = _TAG_NAME.match(tag)
    if name is None:
        return None
    position, end = name.end(), len(tag) - 1
    attributes: dict[str, str] = {}
    span: tuple[int, int] | None = None
    while position < end:
        match = _ATTRIBUTE.match(tag, position, end)
        if match is None or match.end() == position:
            break
        position = match.end()
        key = match.group("name").lower()
        if not key or key in attributes:
            continue
        raw = match.group("value")
        attributes[key] = "" if raw is None else attribute_value(raw)
        if key == "href" and raw is not None:
            span = match.span("value")
    if span is None:
        return None
    return attributes, span
