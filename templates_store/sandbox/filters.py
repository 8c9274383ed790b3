"""The filters and tests a template may use: Jinja's own, each wrapped to check the deadline,
its arguments' size and what it produces."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from jinja2 import filters as jinja_filters
from jinja2 import pass_context
from jinja2 import tests as jinja_tests
from jinja2.utils import _PassArg
from markupsafe import Markup, escape

from templates_store.sandbox.budget import Budget, BudgetContext, LimitExceeded
from templates_store.sandbox.output import _json_default, to_text


def _guard(
    func: Callable[..., Any], precheck: Callable[..., None] | None = None
) -> Callable[..., Any]:
    """Wrap a Jinja filter or test: deadline check, optional argument check, result check."""
    kind = _PassArg.from_obj(func)

    @pass_context
    def guarded(context: BudgetContext, *args: Any, **kwargs: Any) -> Any:
        budget = context.budget
        budget.checkpoint()
        if precheck is not None:
            precheck(budget, *args, **kwargs)
        if kind is _PassArg.context:
            result = func(context, *args, **kwargs)
        elif kind is _PassArg.eval_context:
            result = func(context.eval_ctx, *args, **kwargs)
        elif kind is _PassArg.environment:
            result = func(context.environment, *args, **kwargs)
        else:
            result = func(*args, **kwargs)
        return budget.produced(result)

    guarded.__name__ = getattr(func, "__name__", "filter")
    return guarded


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else to_text(value)


def _pre_items(budget: Budget, value: Any, *args: Any, **kwargs: Any) -> None:
    if hasattr(value, "__len__"):
        budget.need_items(len(value))


def _pre_text_filter(budget: Budget, value: Any, *args: Any, **kwargs: Any) -> None:
    if len(_as_text(value)) > budget.limits.max_text_filter_chars:
        raise LimitExceeded(
            f"this filter takes at most {budget.limits.max_text_filter_chars} characters"
        )


def _pre_wordwrap(
    budget: Budget,
    value: Any,
    width: int = 79,
    break_long_words: bool = True,
    wrapstring: str | None = None,
    *args: Any,
    **kwargs: Any,
) -> None:
    _pre_text_filter(budget, value)
    text = _as_text(value)
    budget.need_chars(len(text) + (len(text) + 1) * len(wrapstring or "\n"))


def _pre_center(budget: Budget, value: Any, width: int = 80, *args: Any, **kwargs: Any) -> None:
    if isinstance(width, int):
        budget.need_chars(width)


def _pre_indent(
    budget: Budget, value: Any, width: int | str = 4, *args: Any, **kwargs: Any
) -> None:
    text = _as_text(value)
    prefix = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    budget.need_chars(len(text) + (text.count("\n") + 1) * prefix)


def _pre_replace(
    budget: Budget, value: Any, old: Any = "", new: Any = "", count: Any = None, **kwargs: Any
) -> None:
    text, old_text, new_text = _as_text(value), _as_text(old), _as_text(new)
    hits = text.count(old_text)
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    budget.need_chars(len(text) + hits * max(0, len(new_text) - len(old_text)))


def _pre_join(budget: Budget, value: Any, d: Any = "", *args: Any, **kwargs: Any) -> None:
    if hasattr(value, "__len__"):
        budget.need_items(len(value))
        budget.need_chars(len(value) * len(_as_text(d)))


def _pre_batch(budget: Budget, value: Any, linecount: Any = 1, *args: Any, **kwargs: Any) -> None:
    _pre_items(budget, value)
    if isinstance(linecount, int):
        budget.need_items(abs(linecount))


def _pre_slice(budget: Budget, value: Any, slices: Any = 1, *args: Any, **kwargs: Any) -> None:
    _pre_items(budget, value)
    if isinstance(slices, int):
        budget.need_items(abs(slices))


def _pre_sum(
    budget: Budget, value: Any, attribute: Any = None, start: Any = 0, **kwargs: Any
) -> None:
    _pre_items(budget, value)
    if not isinstance(start, (int, float)):
        raise LimitExceeded("sum() adds numbers only")


def _safe(value: Any) -> Markup:
    # Unescaped output is the point of {{{ }}} and |safe: the template author asks for it.
    return Markup(_as_text(value))  # noqa: S704


def _string(value: Any) -> str:
    return _as_text(value)


def _escape(value: Any) -> Markup:
    return escape(value if hasattr(value, "__html__") else _as_text(value))


def _forceescape(value: Any) -> Markup:
    return escape(str(value) if hasattr(value, "__html__") else _as_text(value))


def _tojson(value: Any) -> Markup:
    text = json.dumps(value, ensure_ascii=False, skipkeys=True, default=_json_default)
    # Same escaping as Jinja's tojson: the result may sit inside <script> or an attribute.
    return Markup(  # noqa: S704 - the JSON text has <, >, & and ' escaped
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("'", "\\u0027")
    )


_JINJA_FILTERS = jinja_filters.FILTERS

_PUBLIC_FILTERS: dict[str, Callable[..., Any]] = {
    "abs": _guard(_JINJA_FILTERS["abs"]),
    "batch": _guard(_JINJA_FILTERS["batch"], _pre_batch),
    "capitalize": _guard(_JINJA_FILTERS["capitalize"]),
    "center": _guard(_JINJA_FILTERS["center"], _pre_center),
    "count": _guard(_JINJA_FILTERS["count"]),
    "default": _guard(_JINJA_FILTERS["default"]),
    "d": _guard(_JINJA_FILTERS["d"]),
    "dictsort": _guard(_JINJA_FILTERS["dictsort"], _pre_items),
    "escape": _guard(_escape),
    "e": _guard(_escape),
    "filesizeformat": _guard(_JINJA_FILTERS["filesizeformat"]),
    "first": _guard(_JINJA_FILTERS["first"]),
    "float": _guard(_JINJA_FILTERS["float"]),
    "forceescape": _guard(_forceescape),
    "groupby": _guard(_JINJA_FILTERS["groupby"], _pre_items),
    "indent": _guard(_JINJA_FILTERS["indent"], _pre_indent),
    "int": _guard(_JINJA_FILTERS["int"]),
    "items": _guard(_JINJA_FILTERS["items"], _pre_items),
    "join": _guard(_JINJA_FILTERS["join"], _pre_join),
    "last": _guard(_JINJA_FILTERS["last"]),
    "length": _guard(_JINJA_FILTERS["length"]),
    "list": _guard(_JINJA_FILTERS["list"], _pre_items),
    "lower": _guard(_JINJA_FILTERS["lower"]),
    "max": _guard(_JINJA_FILTERS["max"], _pre_items),
    "min": _guard(_JINJA_FILTERS["min"], _pre_items),
    "random": _guard(_JINJA_FILTERS["random"]),
    "replace": _guard(_JINJA_FILTERS["replace"], _pre_replace),
    "reverse": _guard(_JINJA_FILTERS["reverse"], _pre_items),
    "round": _guard(_JINJA_FILTERS["round"]),
    "safe": _guard(_safe),
    "slice": _guard(_JINJA_FILTERS["slice"], _pre_slice),
    "sort": _guard(_JINJA_FILTERS["sort"], _pre_items),
    "string": _guard(_string),
    "striptags": _guard(_JINJA_FILTERS["striptags"], _pre_text_filter),
    "sum": _guard(_JINJA_FILTERS["sum"], _pre_sum),
    "title": _guard(_JINJA_FILTERS["title"], _pre_text_filter),
    "tojson": _guard(_tojson),
    "trim": _guard(_JINJA_FILTERS["trim"]),
    "truncate": _guard(_JINJA_FILTERS["truncate"]),
    "unique": _guard(_JINJA_FILTERS["unique"], _pre_items),
    "upper": _guard(_JINJA_FILTERS["upper"]),
    "urlencode": _guard(_JINJA_FILTERS["urlencode"], _pre_text_filter),
    "wordcount": _guard(_JINJA_FILTERS["wordcount"], _pre_text_filter),
    "wordwrap": _guard(_JINJA_FILTERS["wordwrap"], _pre_wordwrap),
}

_PUBLIC_TESTS: dict[str, Callable[..., Any]] = {
    name: _guard(func)
    for name, func in jinja_tests.TESTS.items()
    if name not in {"callable", "filter", "test"}
}


def _pre_map(budget: Budget, value: Any, *args: Any, **kwargs: Any) -> None:
    _pre_items(budget, value)
    # map('name') applies the filter called `name`; only public filters qualify.
    if args and "attribute" not in kwargs and args[0] not in _PUBLIC_FILTERS:
        raise LimitExceeded(f"no filter named {args[0]!r}")


def _pre_select(budget: Budget, value: Any, *args: Any, **kwargs: Any) -> None:
    _pre_items(budget, value)
    if args and args[0] not in _PUBLIC_TESTS:
        raise LimitExceeded(f"no test named {args[0]!r}")


def _pre_selectattr(budget: Budget, value: Any, *args: Any, **kwargs: Any) -> None:
    _pre_items(budget, value)
    if len(args) > 1 and args[1] not in _PUBLIC_TESTS:
        raise LimitExceeded(f"no test named {args[1]!r}")


_PUBLIC_FILTERS.update(
    {
        "map": _guard(_JINJA_FILTERS["map"], _pre_map),
        "select": _guard(_JINJA_FILTERS["select"], _pre_select),
        "reject": _guard(_JINJA_FILTERS["reject"], _pre_select),
        "selectattr": _guard(_JINJA_FILTERS["selectattr"], _pre_selectattr),
        "rejectattr": _guard(_JINJA_FILTERS["rejectattr"], _pre_selectattr),
    }
)

PUBLIC_FILTER_NAMES = frozenset(_PUBLIC_FILTERS)
