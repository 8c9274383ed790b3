"""Compiling and rendering templates. Pure: strings in, strings out.

The shortcode language is Jinja with one addition and a sandbox:

* ``{{name}}`` (spaces allowed) inserts ``data["name"]``, HTML-escaped in ``bodyHtml`` and as is
  in ``subject`` and ``bodyText``; ``{{{name}}}`` inserts it without escaping;
* ``{{user.first}}`` reads nested data; mapping keys win over Python attributes, so
  ``{{items}}`` or ``{{user.keys}}`` are data; a missing value (or a missing step of a path)
  renders as nothing;
* ``{% if %}``/``{% elif %}``/``{% else %}``, ``{% for %}`` with ``loop.index`` & co.,
  ``{% set %}``, ``{% with %}``, ``{% filter %}``, a whitelist of filters and tests, and a
  bounded ``range()``;
* no include/import/extends/macro/call/block, no method calls, no Python attributes.

Compiling costs milliseconds, rendering microseconds: keep :class:`CompiledTemplate` objects in a
:class:`TemplateCache`.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import jinja2
from jinja2 import Template as JinjaTemplate

from templates_store.css import inline_css
from templates_store.errors import RenderError, TemplateSyntaxError
from templates_store.sandbox import (
    Budget,
    Instrument,
    LimitExceeded,
    Refused,
    RenderLimits,
    SandboxEnvironment,
    check,
    shortcodes,
)

__all__ = [
    "PARTS",
    "CompiledTemplate",
    "RenderError",
    "RenderLimits",
    "RenderedContent",
    "TemplateCache",
    "TemplateSyntaxError",
    "compile_template",
    "extract_shortcodes",
    "inline_css",
    "sample_data",
    "translate",
]

SUBJECT = "subject"
BODY_HTML = "bodyHtml"
BODY_TEXT = "bodyText"
PARTS = (SUBJECT, BODY_HTML, BODY_TEXT)

DEFAULT_LIMITS = RenderLimits()

_RAW_OUTPUT = re.compile(r"\{\{\{(.*?)\}\}\}", re.DOTALL)
_NEWLINES = re.compile(r"\r\n|\r|\n")

_environment = SandboxEnvironment()


def translate(source: str) -> str:
    """The Jinja source of a shortcode template: ``{{{x}}}`` becomes ``{{ (x)|safe }}``.

    Line breaks are kept, so line numbers of the result are those of ``source``.
    """

    def raw(match: re.Match[str]) -> str:
        expression = match.group(1)
        if not expression.strip():
            return "{{" + expression + "}}"
        return "{{ (" + expression + ")|safe }}"

    return _RAW_OUTPUT.sub(raw, source)


@dataclass(frozen=True, slots=True)
class RenderedContent:
    """A rendered message. A part that the template does not have stays ``None``."""

    subject: str | None
    body_html: str | None
    body_text: str | None


@dataclass(frozen=True, slots=True)
class _Part:
    name: str
    template: JinjaTemplate


class CompiledTemplate:
    """The compiled parts of one template version, made by :func:`compile_template`. Immutable
    and safe to share between threads.

    ``shortcodes`` lists the data names the template reads (sorted, unique); ``limits`` are the
    bounds every render is held to.
    """

    __slots__ = ("_parts", "limits", "shortcodes")

    def __init__(
        self, parts: dict[str, JinjaTemplate], shortcodes: list[str], limits: RenderLimits
    ) -> None:
        self._parts = {name: _Part(name, template) for name, template in parts.items()}
        self.shortcodes = shortcodes
        self.limits = limits

    def render(self, data: Mapping[str, Any] | None = None) -> RenderedContent:
        """Render every part with ``data`` (the substitution data).

        The subject has each line break replaced by a space, so it can never inject a header.
        Raises :class:`RenderError` when a limit of :attr:`limits` is exceeded or the template
        fails on the data (e.g. iterates over a number); never hangs.
        """
        budget = Budget(self.limits)
        variables = {**_environment.globals, **data} if data else dict(_environment.globals)
        parts = self._parts
        subject = parts.get(SUBJECT)
        html = parts.get(BODY_HTML)
        text = parts.get(BODY_TEXT)
        rendered_subject = None
        if subject is not None:
            rendered_subject = _NEWLINES.sub(" ", self._render(subject, variables, budget))
        return RenderedContent(
            subject=rendered_subject,
            body_html=None if html is None else self._render(html, variables, budget),
            body_text=None if text is None else self._render(text, variables, budget),
        )

    def _render(self, part: _Part, variables: dict[str, Any], budget: Budget) -> str:
        template = part.template
        context = template.new_context(variables, shared=True)
        context.budget = budget  # type: ignore[attr-defined]
        try:
            output = "".join(template.root_render_func(context))
        except LimitExceeded as exc:
            raise RenderError(str(exc), part.name, _failing_line(template, exc)) from None
        except RecursionError:
            raise RenderError("the data is nested too deeply", part.name) from None
        except Exception as exc:
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            raise RenderError(message, part.name, _failing_line(template, exc)) from None
        if len(output) > self.limits.max_part_chars:
            raise RenderError(
                f"the rendered part is longer than {self.limits.max_part_chars} characters",
                part.name,
            )
        return output


def _failing_line(template: JinjaTemplate, exc: BaseException) -> int | None:
    """Template line of the innermost template frame of ``exc``'s traceback."""
    tb: TracebackType | None = exc.__traceback__
    lineno = None
    while tb is not None:
        if tb.tb_frame.f_globals.get("environment") is template.environment:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    if lineno is None:
        return None
    try:
        return template.get_corresponding_lineno(lineno)
    except Exception:
        return None


def _parse(part: str, source: str) -> jinja2.nodes.Template:
    try:
        tree = _environment.parse(translate(source), name=part)
        check(tree)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateSyntaxError(part, exc.lineno, exc.message or "invalid syntax") from None
    except Refused as exc:
        raise TemplateSyntaxError(part, exc.lineno, exc.message) from None
    except (RecursionError, MemoryError):
        raise TemplateSyntaxError(part, None, "the template is nested too deeply") from None
    return tree


def _compile(part: str, tree: jinja2.nodes.Template) -> JinjaTemplate:
    try:
        tree = Instrument().visit(tree)
        code = _environment.compile(tree, name=part)
        return _environment.template_class.from_code(
            _environment, code, _environment.make_globals(None), None
        )
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateSyntaxError(part, exc.lineno, exc.message or "invalid syntax") from None
    except (RecursionError, MemoryError, SyntaxError):
        raise TemplateSyntaxError(part, None, "the template is nested too deeply") from None


def _sources(
    subject: str | None, body_html: str | None, body_text: str | None
) -> list[tuple[str, str]]:
    return [
        (part, source)
        for part, source in ((SUBJECT, subject), (BODY_HTML, body_html), (BODY_TEXT, body_text))
        if source is not None
    ]


def compile_template(
    subject: str | None,
    body_html: str | None,
    body_text: str | None,
    *,
    limits: RenderLimits = DEFAULT_LIMITS,
) -> CompiledTemplate:
    """Compile the parts of a template (``None`` parts are absent and render as ``None``).

    Raises :class:`TemplateSyntaxError` naming the first part that does not parse or uses a
    refused construct, with the line as the client wrote it.
    """
    parts: dict[str, JinjaTemplate] = {}
    names: set[str] = set()
    for part, source in _sources(subject, body_html, body_text):
        tree = _parse(part, source)
        names |= shortcodes(tree)
        parts[part] = _compile(part, tree)
    return CompiledTemplate(parts, sorted(names), limits)


def extract_shortcodes(
    subject: str | None = None, body_html: str | None = None, body_text: str | None = None
) -> list[str]:
    """Sorted, unique data names the parts read: top-level names and dotted paths as written
    (``user.first``); loop variables and names set by the template are left out.

    Raises :class:`TemplateSyntaxError` like :func:`compile_template`.
    """
    names: set[str] = set()
    for part, source in _sources(subject, body_html, body_text):
        names |= shortcodes(_parse(part, source))
    return sorted(names)


def sample_data(shortcodes: Iterable[str]) -> dict[str, Any]:
    """A substitution-data skeleton for the names a template reads (see
    :func:`extract_shortcodes`): dotted paths become nested objects, every leaf an empty string,
    ready to be filled in for a preview. A name used both alone and with attributes
    (``user`` and ``user.first``) becomes an object."""
    skeleton: dict[str, Any] = {}
    for name in sorted(shortcodes, key=lambda path: path.count(".")):
        *parents, leaf = name.split(".")
        node = skeleton
        for parent in parents:
            child = node.get(parent)
            if not isinstance(child, dict):
                child = node[parent] = {}
            node = child
        node.setdefault(leaf, "")
    return skeleton


def render_subject(
    source: str, data: Mapping[str, Any] | None = None, *, limits: RenderLimits = DEFAULT_LIMITS
) -> str:
    """``source`` rendered as a template subject (raw, line breaks as spaces) with ``data``.

    For a subject given beside a stored template. Compiled subjects are cached by their text;
    one without ``{`` has no shortcode and is returned as is. Raises
    :class:`TemplateSyntaxError` (part ``subject``) and :class:`RenderError`.
    """
    if "{" not in source:
        return source
    compiled = _subjects.get_or_compile(
        (source, limits), lambda: compile_template(source, None, None, limits=limits)
    )
    return compiled.render(data).subject or ""


class TemplateCache:
    """A thread-safe LRU of compiled templates.

    Keys are any hashable; the store uses ``(account_id, template_id, version, revision)``.
    Compilation runs outside the lock, so a slow compile never blocks renders of other
    templates (two threads missing the same key may both compile; the first result is kept).
    """

    def __init__(self, maxsize: int = 256) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self._items: OrderedDict[Hashable, CompiledTemplate] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> CompiledTemplate | None:
        with self._lock:
            compiled = self._items.get(key)
            if compiled is not None:
                self._items.move_to_end(key)
            return compiled

    def put(self, key: Hashable, compiled: CompiledTemplate) -> CompiledTemplate:
        """Store ``compiled`` unless the key is already present; return the cached value."""
        with self._lock:
            existing = self._items.get(key)
            if existing is not None:
                self._items.move_to_end(key)
                return existing
            self._items[key] = compiled
            if len(self._items) > self.maxsize:
                self._items.popitem(last=False)
            return compiled

    def get_or_compile(
        self, key: Hashable, factory: Callable[[], CompiledTemplate]
    ) -> CompiledTemplate:
        """The cached template for ``key``, compiling it with ``factory()`` on a miss.

        Whatever ``factory`` raises propagates and nothing is cached.
        """
        compiled = self.get(key)
        if compiled is not None:
            return compiled
        return self.put(key, factory())

    def discard(self, predicate: Callable[[Hashable], bool]) -> None:
        """Drop every entry whose key satisfies ``predicate``."""
        with self._lock:
            for key in [key for key in self._items if predicate(key)]:
                del self._items[key]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


_subjects = TemplateCache()
