"""The text/plain alternative of an HTML-only message: what a reader sees of the HTML, as text.

Spam filters count a lone text/html part against the sender (SpamAssassin's MIME_HTML_ONLY),
and some readers show only text. The text is made by inscriptis (a maintained HTML-to-text
converter that lays out tables and lists as a browser would): headings and paragraphs on their
own lines, every link kept with its URL, images, scripts and styles left out.
"""

from __future__ import annotations

import re

from inscriptis import get_text
from inscriptis.model.config import ParserConfig

_CONFIG = ParserConfig(display_links=True, display_images=False)
# inscriptis writes a link as [text](url); a link whose text is its URL needs saying once.
_SELF_LINK = re.compile(r"\[([^\]\n]+)\]\(\1\)")
_TRAILING_SPACES = re.compile(r"[ \t]+$", re.MULTILINE)
_BLANK_RUNS = re.compile(r"\n{3,}")


def text_from_html(html: str) -> str:
    """The text a reader sees of ``html``, links as ``[text](url)``; ``""`` for HTML that shows
    no text. Never raises for malformed HTML."""
    try:
        text = get_text(html, _CONFIG)
    except Exception:  # lxml gives up on some byte soups; a text part is then not possible
        return ""
    text = _SELF_LINK.sub(r"\1", text)
    text = _TRAILING_SPACES.sub("", text)
    text = _BLANK_RUNS.sub("\n\n", text).strip()
    return text + "\n" if text else ""
