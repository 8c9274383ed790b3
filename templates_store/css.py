"""CSS inlining of an HTML template, done once when a template version is saved."""

from __future__ import annotations

import logging
import re

import cssutils
from lxml.html import HtmlElement
from premailer import Premailer
from premailer.merge_style import csstext_to_pairs

# Every piece of template syntax: raw and escaped output, statements, comments.
_TEMPLATE_SYNTAX = re.compile(r"\{\{\{.*?\}\}\}|\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.DOTALL)
_STYLE_ELEMENT = re.compile(r"<style\b.*?</style\s*>", re.IGNORECASE | re.DOTALL)
_STYLE_ATTRIBUTE = re.compile(r"(<[a-zA-Z][^>]*?\s)style(\s*=)", re.IGNORECASE)


def inline_css(html: str) -> str:
    """Move the rules of the document's ``<style>`` elements into ``style`` attributes.

    Template syntax passes through untouched wherever it stands (attributes, URLs, text,
    ``<title>``, style declarations): each ``{{…}}``, ``{{{…}}}``, ``{%…%}`` and ``{#…#}`` is
    swapped for an inert token before inlining and restored afterwards, because premailer and
    lxml would otherwise percent-encode it inside ``href``/``src``. Rules that cannot be inlined
    (``@media``, ``:hover``) stay in a ``<style>`` element, with their ``!important``; rules
    are merged into each element's own style by the cascade (see :func:`cascade`); nothing is
    fetched from the network or the file system.

    For mail clients that ignore CSS, an element's inlined ``background-color``, ``width``,
    ``height``, ``text-align`` and ``vertical-align`` are also written as the HTML attributes
    that mean the same (``bgcolor``, ``width``, ``height``, ``align``, ``valign``), but only on
    elements where the HTML Living Standard (§15.3, rendering) maps that attribute onto that
    very property, and only with a value valid for it: a six-digit ``#rrggbb`` colour, whole
    pixels or a percentage, a keyword. A browser ranks any CSS above such attributes, so they
    never change how a CSS-capable client draws the mail.

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
    # premailer would let an element's own style beat the sheet's !important; hidden from it,
    # the two are merged by the cascade's rules afterwards (see _Inliner).
    hidden_style = f"data-{marker}-style"
    protected = _STYLE_ATTRIBUTE.sub(rf"\1{hidden_style}\2", protected)
    if not pieces:
        protected_styles = ""
    else:
        protected_styles = "".join(m.group(0) for m in _STYLE_ELEMENT.finditer(protected))
    try:
        inlined = _Inliner(
            hidden_style,
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

    # The elements no rule matched keep their own style, as written.
    inlined = re.sub(rf"(<[^>]*\s){re.escape(hidden_style)}(=)", r"\1style\2", inlined)
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


# Which elements' presentational attribute maps onto the same CSS property (HTML Living
# Standard §15.3): elsewhere the attribute means something else (``align`` on a table or an
# image moves the box itself) or nothing.
_BGCOLOR_ELEMENTS = frozenset({"body", "table", "tr", "td", "th"})
_WIDTH_ELEMENTS = frozenset({"table", "td", "th", "col", "colgroup", "img", "hr"})
_HEIGHT_ELEMENTS = frozenset({"table", "tr", "td", "th", "img"})
_ALIGN_ELEMENTS = frozenset(
    {"p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "caption"}
    | {"thead", "tbody", "tfoot", "tr", "td", "th"}
)
_VALIGN_ELEMENTS = frozenset({"thead", "tbody", "tfoot", "tr", "td", "th", "col", "colgroup"})
_ALIGN_VALUES = frozenset({"left", "right", "center", "justify"})
_VALIGN_VALUES = frozenset({"top", "middle", "bottom", "baseline"})
_PIXELS = re.compile(r"(\d+)(?:px)?")
_PERCENT = re.compile(r"\d+%")


def presentational_attributes(tag: str, style: str) -> dict[str, str]:
    """The HTML attributes that say what ``style`` (a ``style`` attribute's declarations) says
    about an element named ``tag``, each with a valid value; properties whose value has no
    attribute form (``auto``, ``em``, ``url()``, a translucent colour…) give none."""
    declarations = cssutils.parseStyle(style, validate=False)
    found: dict[str, str] = {}

    def value(name: str) -> str:
        return declarations.getPropertyValue(name).strip().lower()

    if tag in _BGCOLOR_ELEMENTS and (colour := _six_digit_colour(declarations)):
        found["bgcolor"] = colour
    for name, elements in (("width", _WIDTH_ELEMENTS), ("height", _HEIGHT_ELEMENTS)):
        if tag not in elements:
            continue
        given = value(name)
        pixels = _PIXELS.fullmatch(given)
        if pixels and (given.endswith("px") or given == "0"):
            found[name] = pixels.group(1)
        elif _PERCENT.fullmatch(given) and tag != "img" and name == "width":
            found[name] = given
    if tag in _ALIGN_ELEMENTS and value("text-align") in _ALIGN_VALUES:
        found["align"] = value("text-align")
    if tag in _VALIGN_ELEMENTS and value("vertical-align") in _VALIGN_VALUES:
        found["valign"] = value("vertical-align")
    return found


def _six_digit_colour(declarations: cssutils.css.CSSStyleDeclaration) -> str | None:
    # IBM Notes and others misread three-digit colours, and bgcolor takes no alpha.
    declared = declarations.getProperty("background-color")
    if declared is None or declared.propertyValue.length != 1:
        return None
    colour = declared.propertyValue[0]
    if not isinstance(colour, cssutils.css.ColorValue) or colour.alpha != 1:
        return None
    return f"#{colour.red:02x}{colour.green:02x}{colour.blue:02x}"


def cascade(sheet_style: str, own_style: str) -> str:
    """An element's ``style`` attribute once the sheet's rules that match it, saying
    ``sheet_style``, are inlined into its own ``own_style``.

    By CSS Cascading Level 4 §6.1 an important declaration of the sheet beats the element's
    normal one, and the element's wins otherwise. The sheet's declarations are written without
    ``!important``: in a ``style`` attribute it would also beat the rules kept in ``<style>``
    (an ``@media`` override marked ``!important``), which it did not in the original."""
    merged = {
        name: (value.removesuffix("!important").rstrip(), value.endswith("!important"))
        for name, value in csstext_to_pairs(sheet_style, validate=False)
    }
    for name, value in csstext_to_pairs(own_style, validate=False):
        important = value.endswith("!important")
        if important or not merged.get(name, ("", False))[1]:
            merged.pop(name, None)  # the element's declaration takes its place at the end
            merged[name] = (value, important)
    return "; ".join(f"{name}:{value}" for name, (value, _) in merged.items())


class _Inliner(Premailer):
    """premailer, with an element's own style merged by :func:`cascade` and presentational
    attributes written by :func:`presentational_attributes`.

    premailer keeps an element's own style above every rule, ``!important`` or not, and copies
    the CSS text into attributes as it stands (``bgcolor="#f60 !important"``, ``width="10em"``,
    ``align="center"`` on a table), which browsers read as other colours and sizes. Its step
    that writes those attributes is given each element's final style: the one hook for both.
    The element's own style reaches it under ``hidden_style``, out of premailer's sight."""

    def __init__(self, hidden_style: str, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.hidden_style = hidden_style

    def _style_to_basic_html_attributes(
        self, element: HtmlElement, style_content: str, force: bool = False
    ) -> None:
        if not isinstance(element.tag, str):
            return
        style_content = cascade(style_content, element.attrib.pop(self.hidden_style, ""))
        element.attrib["style"] = style_content
        for name, value in presentational_attributes(element.tag.lower(), style_content).items():
            if force or name not in element.attrib:
                element.attrib[name] = value
