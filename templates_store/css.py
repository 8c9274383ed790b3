"""CSS inlining of an HTML template, done once when a template version is saved."""

from __future__ import annotations

import logging
import re

from premailer import Premailer

# Every piece of template syntax: raw and escaped output, statements, comments.
_TEMPLATE_SYNTAX = re.compile(r"\{\{\{.*?\}\}\}|\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.DOTALL)
_STYLE_ELEMENT = re.compile(r"<style\b.*?</style\s*>", re.IGNORECASE | re.DOTALL)


def inline_css(html: str) -> str:
    """Move the rules of the document's ``<style>`` elements into ``style`` attributes.

    Template syntax passes through untouched wherever it stands (attributes, URLs, text,
    ``<title>``, style declarations): each ``{{…}}``, ``{{{…}}}``, ``{%…%}`` and ``{#…#}`` is
    swapped for an inert token before inlining and restored afterwards, because premailer and
    lxml would otherwise percent-encode it inside ``href``/``src``. Rules that cannot be inlined
    (``@media``, ``:hover``) stay in a ``<style>`` element; ``!important`` is kept; nothing is
    fetched from the network or the file system.

    Returns ``html`` unchanged when it is empty, has no ``<style>`` element, cannot be processed,
    or when inlining would lose template syntax outside a ``<style>`` element (a statement tag
    inside CSS that premailer rewrites, for instance). Never raises for malformed input.
    """
    if not html or not html.strip() or "<style" not in html.lower():
        return html
    marker = "ltplq"
    while marker in html.lower():
        marker += "q"
    pieces: list[str] = []

    def protect(match: re.Match[str]) -> str:
        pieces.append(match.group(0))
        return f"{marker}{len(pieces) - 1:06d}x"

    protected = _TEMPLATE_SYNTAX.sub(protect, html)
    if not pieces:
        protected_styles = ""
    else:
        protected_styles = "".join(m.group(0) for m in _STYLE_ELEMENT.finditer(protected))
    try:
        inlined = Premailer(
            protected,
            base_url=None,
            disable_link_rewrites=True,
            strip_important=False,
            keep_style_tags=False,
            disable_validation=True,
            allow_network=False,
            allow_loading_external_files=False,
            cssutils_logging_level=logging.CRITICAL,
        ).transform()
    except Exception:
        return html

    token = re.compile(re.escape(marker) + r"(\d{6})x")
    seen: dict[int, int] = {}

    def restore(match: re.Match[str]) -> str:
        index = int(match.group(1))
        if index >= len(pieces):
            return match.group(0)
        seen[index] = seen.get(index, 0) + 1
        return pieces[index]

    restored = token.sub(restore, inlined)
    for index, piece in enumerate(pieces):
        count = seen.get(index, 0)
        is_statement = not piece.startswith("{{")
        in_style = f"{marker}{index:06d}x" in protected_styles
        if (is_statement and count != 1) or (count == 0 and not in_style):
            return html
    return restored
