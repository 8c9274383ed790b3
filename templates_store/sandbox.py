"""The sandbox templates run in: a locked-down Jinja environment and a per-render budget.

What a template can reach: the substitution data (mappings, lists, strings, numbers, booleans),
the loop attributes (``loop.index`` …), a bounded ``range()`` and a whitelist of filters and
tests. Attribute and item access resolve mapping keys and sequence indexes only, never Python
attributes, so methods, dunders, globals and modules are out of reach by construction; the
constructs that could load other templates or define callables (include, import, extends, macro,
call, block) are refused when the template is compiled.

What a template can spend: every loop step, every produced string or container and every output
is charged to a :class:`Budget`; the operations that can be expensive check a deadline first.
A render that exceeds a limit stops with :class:`LimitExceeded`, which the caller turns into a
``RenderError``.
"""

from __future__ import annotations

import json
import operator
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import Undefined, nodes, pass_context
from jinja2 import filters as jinja_filters
from jinja2 import tests as jinja_tests
from jinja2.runtime import Context, LoopContext, markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import _PassArg
from jinja2.visitor import NodeTransformer
from markupsafe import Markup, escape

HTML_PART = "bodyHtml"

# Names of the internal filters the compiler inserts. They contain a colon, which the template
# lexer never produces, so a template cannot name them.
_ITERATE = "layang:iterate"
_COMPARE = "layang:compare"
_CONCAT = "layang:concat"
_CONTAINER = "layang:container"
_SLICE = "layang:slice"

LOOP_VALUE_ATTRIBUTES = frozenset(
    {
        "index",
        "index0",
        "revindex",
        "revindex0",
        "first",
        "last",
        "length",
        "depth",
        "depth0",
        "previtem",
        "nextitem",
    }
)
LOOP_METHODS = frozenset({"cycle", "changed"})
_LOOP_ATTRIBUTES = LOOP_VALUE_ATTRIBUTES | LOOP_METHODS
_GROUP_ATTRIBUTES = frozenset({"grouper", "list"})


class LimitExceeded(Exception):
    """A render went over one of its :class:`RenderLimits`, or hit an unsupported operation."""


@dataclass(frozen=True, slots=True)
class RenderLimits:
    """Bounds of one render of one template (all three parts together, except where noted).

    ``max_part_chars``: largest rendered part, and largest single string a template may build.
    ``max_work_chars``: characters a render may produce in total, counting intermediate strings,
    every output (also inside ``{% set %}`` blocks) and the static text of each loop iteration.
    ``max_iterations``: loop iterations across all loops, nested ones included; also the largest
    ``range()`` and the largest list a filter may build or process.
    ``max_weight``: size of a list/mapping counted as if serialized (strings by length), so
    structures built by sharing cannot hide an exponential size.
    ``max_int_bits``: largest integer arithmetic may produce.
    ``max_text_filter_chars``: input bound of the text filters whose cost is high per character
    (title, wordwrap, striptags, urlencode, wordcount).
    ``timeout``: seconds after which the render stops, checked at every loop step and costly
    operation.
    """

    max_part_chars: int = 5 * 1024 * 1024
    max_work_chars: int = 32 * 1024 * 1024
    max_iterations: int = 100_000
    max_weight: int = 8 * 1024 * 1024
    max_int_bits: int = 8192
    max_text_filter_chars: int = 128 * 1024
    timeout: float = 1.0


class Budget:
    """What one render may still spend. Created per render; never shared between threads."""

    __slots__ = ("chars", "deadline", "iterations", "limits", "weights")

    def __init__(self, limits: RenderLimits) -> None:
        self.limits = limits
        self.iterations = limits.max_iterations
        self.chars = limits.max_work_chars
        self.deadline = time.monotonic() + limits.timeout
        # id -> (object, weight); keeping the object pins its id for the render's lifetime.
        self.weights: dict[int, tuple[Any, int]] = {}

    def checkpoint(self) -> None:
        if time.monotonic() > self.deadline:
            raise LimitExceeded(f"rendering took longer than {self.limits.timeout:g} s")

    def charge(self, count: int) -> None:
        self.chars -= count
        if self.chars < 0:
            raise LimitExceeded(
                f"the template produces more than {self.limits.max_work_chars} characters"
            )

    def step(self, static_chars: int) -> None:
        self.iterations -= 1
        if self.iterations < 0:
            raise LimitExceeded(
                f"the template runs more than {self.limits.max_iterations} loop iterations"
            )
        if static_chars:
            self.charge(static_chars)
        if not self.iterations & 15:
            self.checkpoint()

    def text(self, value: str) -> str:
        size = len(value)
        if size > self.limits.max_part_chars:
            raise LimitExceeded(
                f"a value would be longer than {self.limits.max_part_chars} characters"
            )
        self.charge(size)
        return value

    def need_chars(self, size: int) -> None:
        """Refuse before building a string of ``size`` characters."""
        if size > self.limits.max_part_chars:
            raise LimitExceeded(
                f"a value would be longer than {self.limits.max_part_chars} characters"
            )

    def need_items(self, count: int) -> None:
        if count > self.limits.max_iterations:
            raise LimitExceeded(f"a list would have more than {self.limits.max_iterations} items")

    def weigh(self, value: Any) -> int:
        """Serialized size of ``value``; raises when over ``max_weight``."""
        if isinstance(value, str):
            return len(value) + 2
        if not isinstance(value, (list, tuple, dict)):
            return 8
        known = self.weights.get(id(value))
        if known is not None:
            return known[1]
        limit = self.limits.max_weight
        total = 2
        children: Iterable[Any] = (
            (part for pair in value.items() for part in pair) if isinstance(value, dict) else value
        )
        for child in children:
            total += self.weigh(child)
            if total > limit:
                raise LimitExceeded(f"a list or mapping would weigh more than {limit} characters")
        self.weights[id(value)] = (value, total)
        return total

    def produced(self, value: Any) -> Any:
        """Check and charge a value a filter or an operator has just built."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, (list, tuple, dict)):
            self.need_items(len(value))
            self.weigh(value)
            self.charge(len(value))
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            if value.bit_length() > self.limits.max_int_bits:
                raise LimitExceeded(
                    f"a number would be larger than {self.limits.max_int_bits} bits"
                )
            return value
        if isinstance(value, Iterator):
            # Filters such as map, select or reverse return lazy iterators; materializing them
            # keeps generator objects (and their reprs) away from templates.
            items = []
            for item in value:
                items.append(item)
                self.need_items(len(items))
            return self.produced(items)
        return value


class BudgetContext(Context):
    """The render context, carrying the render's :class:`Budget`."""

    budget: Budget

    def derived(self, locals: dict[str, Any] | None = None) -> Context:
        # Calls made inside a loop run in a derived context; it spends the same budget.
        context = super().derived(locals)
        context.budget = self.budget  # type: ignore[attr-defined]
        return context


def to_text(value: Any) -> str:
    """How a value is written into the output: ``None`` and missing values as nothing, booleans
    as ``true``/``false``, lists and mappings as JSON, anything that is not data as nothing."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, Undefined):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, ensure_ascii=False, skipkeys=True, default=_json_default)
    return ""


def _json_default(value: Any) -> Any:
    return None


@pass_context
def _finalize(context: BudgetContext, value: Any) -> Any:
    if type(value) is str:
        context.budget.charge(len(value))
        return value
    text = to_text(value)
    context.budget.charge(len(text))
    return text


class _Range:
    """``range()`` that builds a bounded list. Its ``str`` is empty so that printing the
    function itself shows nothing."""

    jinja_pass_arg = _PassArg.context

    def __call__(self, context: BudgetContext, *args: Any) -> list[int]:
        budget = context.budget
        budget.checkpoint()
        if not all(isinstance(arg, int) for arg in args):
            raise LimitExceeded("range() takes integers")
        numbers = range(*args)
        budget.need_items(len(numbers))
        budget.charge(len(numbers))
        return list(numbers)

    def __repr__(self) -> str:
        return ""


# -- filters -------------------------------------------------------------------------------


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


# -- operations the compiler routes through the budget ---------------------------------------


def _counting(budget: Budget, iterable: Any, static_chars: int) -> Iterator[Any]:
    for item in iterable:
        budget.step(static_chars)
        yield item


@pass_context
def _iterate(context: BudgetContext, iterable: Any, static_chars: int) -> Iterator[Any]:
    context.budget.checkpoint()
    return _counting(context.budget, iterable, static_chars)


_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "lteq": operator.le,
    "gt": operator.gt,
    "gteq": operator.ge,
    "in": lambda left, right: left in right,
    "notin": lambda left, right: left not in right,
}


@pass_context
def _compare(context: BudgetContext, left: Any, *pairs: Any) -> bool:
    context.budget.checkpoint()
    result = True
    for index in range(0, len(pairs), 2):
        right = pairs[index + 1]
        result = _COMPARISONS[pairs[index]](left, right)
        if not result:
            return result
        left = right
    return result


@pass_context
def _concat(context: BudgetContext, *values: Any) -> str:
    budget = context.budget
    budget.checkpoint()
    texts = [_as_text(value) for value in values]
    budget.need_chars(sum(len(text) for text in texts))
    joined = markup_join(texts) if context.eval_ctx.autoescape else str_join(texts)
    return budget.text(joined)


@pass_context
def _container(context: BudgetContext, value: Any) -> Any:
    return context.budget.produced(value)


@pass_context
def _slice(context: BudgetContext, value: Any, start: Any, stop: Any, step: Any) -> Any:
    budget = context.budget
    budget.checkpoint()
    if isinstance(value, Undefined):
        return value
    if not isinstance(value, (str, list, tuple)):
        raise LimitExceeded("only strings and lists can be sliced")
    return budget.produced(value[start:stop:step])


_INTERNAL_FILTERS: dict[str, Callable[..., Any]] = {
    _ITERATE: _iterate,
    _COMPARE: _compare,
    _CONCAT: _concat,
    _CONTAINER: _container,
    _SLICE: _slice,
}


# -- the environment -------------------------------------------------------------------------


def _autoescape(template_name: str | None) -> bool:
    return template_name == HTML_PART


class SandboxEnvironment(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, narrowed further (see the module docstring)."""

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

    def __init__(self) -> None:
        super().__init__(
            autoescape=_autoescape,
            finalize=_finalize,
            undefined=Undefined,
            keep_trailing_newline=True,
            auto_reload=False,
            cache_size=0,
        )
        self.globals.clear()
        self.globals["range"] = _Range()
        self.filters = {**_PUBLIC_FILTERS, **_INTERNAL_FILTERS}
        self.tests = dict(_PUBLIC_TESTS)
        self.context_class = BudgetContext

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return type(obj) is LoopContext and attr in _LOOP_ATTRIBUTES

    def getattr(self, obj: Any, attribute: str) -> Any:
        # Mapping keys win over Python attributes: {{ user.items }} is the data, not dict.items.
        if type(obj) is dict or isinstance(obj, Mapping):
            try:
                return obj[attribute]
            except (KeyError, TypeError):
                return self.undefined(obj=obj, name=attribute)
        if isinstance(obj, Undefined):
            return obj
        if type(obj) is LoopContext and attribute in _LOOP_ATTRIBUTES:
            return getattr(obj, attribute)
        if type(obj) is jinja_filters._GroupTuple and attribute in _GROUP_ATTRIBUTES:
            return getattr(obj, attribute)
        return self.undefined(obj=obj, name=attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        if type(obj) is dict or isinstance(obj, Mapping):
            try:
                return obj[argument]
            except (KeyError, TypeError):
                return self.undefined(obj=obj, name=argument)
        if isinstance(obj, (list, tuple, str)) and isinstance(argument, int):
            try:
                return obj[argument]
            except IndexError:
                return self.undefined(obj=obj, name=argument)
        if isinstance(obj, Undefined):
            return obj
        if isinstance(argument, str):
            return self.getattr(obj, argument)
        return self.undefined(obj=obj, name=argument)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        budget: Budget = context.budget  # type: ignore[attr-defined]
        budget.checkpoint()
        if operator == "%" and isinstance(left, str):
            raise LimitExceeded("string formatting with % is not supported")
        if operator == "*":
            _check_repeat(budget, left, right)
            _check_repeat(budget, right, left)
        elif operator == "**":
            _check_power(budget, left, right)
        elif operator == "+":
            if isinstance(left, str) and isinstance(right, str):
                budget.need_chars(len(left) + len(right))
            elif isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
                budget.need_items(len(left) + len(right))
        return budget.produced(self.binop_table[operator](left, right))


def _check_repeat(budget: Budget, sequence: Any, times: Any) -> None:
    if not isinstance(times, int) or times <= 0:
        return
    if isinstance(sequence, str):
        budget.need_chars(len(sequence) * times)
    elif isinstance(sequence, (list, tuple)):
        budget.need_items(len(sequence) * times)
        if budget.weigh(sequence) * times > budget.limits.max_weight:
            raise LimitExceeded(
                f"a list would weigh more than {budget.limits.max_weight} characters"
            )


def _check_power(budget: Budget, base: Any, exponent: Any) -> None:
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and exponent > 0
        and exponent * (abs(base).bit_length() - 1) > budget.limits.max_int_bits
    ):
        raise LimitExceeded(f"a number would be larger than {budget.limits.max_int_bits} bits")


# -- compile-time checks and instrumentation ------------------------------------------------

_REFUSED_TAGS: dict[type[nodes.Node], str] = {
    nodes.Extends: "extends",
    nodes.Include: "include",
    nodes.Import: "import",
    nodes.FromImport: "from … import",
    nodes.Macro: "macro",
    nodes.CallBlock: "call",
    nodes.Block: "block",
}


class Refused(Exception):
    """A construct the shortcode language does not allow; ``lineno`` locates it."""

    def __init__(self, lineno: int | None, message: str) -> None:
        super().__init__(message)
        self.lineno = lineno
        self.message = message


def _is_name(node: nodes.Node, name: str) -> bool:
    return isinstance(node, nodes.Name) and node.name == name


def check(node: nodes.Node, in_loop: bool = False) -> None:
    """Refuse what the sandbox does not support; raises :class:`Refused`.

    Inside a loop body ``loop`` may only be read through its attributes, so the loop object
    itself (whose ``str`` is a Python repr) never becomes a value.
    """
    tag = _REFUSED_TAGS.get(type(node))
    if tag is not None:
        raise Refused(node.lineno, f"the '{tag}' tag is not supported")
    if isinstance(node, nodes.Filter) and node.name not in PUBLIC_FILTER_NAMES:
        raise Refused(node.lineno, f"no filter named {node.name!r}")
    if isinstance(node, nodes.Test) and node.name not in _PUBLIC_TESTS:
        raise Refused(node.lineno, f"no test named {node.name!r}")
    if isinstance(node, nodes.NSRef):
        raise Refused(node.lineno, "assigning to an attribute is not supported")
    if isinstance(node, nodes.For):
        if node.recursive:
            raise Refused(node.lineno, "recursive loops are not supported")
        check(node.iter, in_loop)
        if node.test is not None:
            check(node.test, True)
        for child in node.body:
            check(child, True)
        for child in node.else_:
            check(child, in_loop)
        return
    if isinstance(node, nodes.Name):
        if node.name == "self":
            raise Refused(node.lineno, "'self' is a reserved name")
        if in_loop and node.name == "loop":
            raise Refused(
                node.lineno,
                "'loop' can only be used through its attributes, e.g. loop.index",
            )
        return
    if isinstance(node, nodes.Getattr) and in_loop and _is_name(node.node, "loop"):
        if node.attr not in LOOP_VALUE_ATTRIBUTES:
            raise Refused(node.lineno, f"'loop.{node.attr}' is not supported")
        return
    if isinstance(node, nodes.Call):
        callee = node.node
        is_loop_method = (
            in_loop
            and isinstance(callee, nodes.Getattr)
            and _is_name(callee.node, "loop")
            and callee.attr in LOOP_METHODS
        )
        if not (is_loop_method or _is_name(callee, "range")):
            raise Refused(
                node.lineno, "only range(), loop.cycle() and loop.changed() can be called"
            )
        for arg in (*node.args, *node.kwargs, node.dyn_args, node.dyn_kwargs):
            if arg is not None:
                check(arg, in_loop)
        return
    for child in node.iter_child_nodes():
        check(child, in_loop)


def _static_chars(body: list[nodes.Node]) -> int:
    """Characters of template text in a loop body, excluding nested loop bodies (they are
    charged per iteration of their own loop)."""
    total = 0
    stack: list[nodes.Node] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, nodes.TemplateData):
            total += len(node.data)
        elif isinstance(node, nodes.For):
            stack.append(node.iter)
            stack.extend(node.else_)
        else:
            stack.extend(node.iter_child_nodes())
    return total


def _internal(name: str, value: nodes.Expr, args: list[nodes.Expr], lineno: int) -> nodes.Filter:
    return nodes.Filter(value, name, args, [], None, None, lineno=lineno)


class Instrument(NodeTransformer):
    """Route loops, comparisons, concatenation, literals and slices through the budget."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        static = nodes.Const(_static_chars(node.body), lineno=node.lineno)
        node.iter = _internal(_ITERATE, node.iter, [static], node.lineno)
        return node

    def visit_Compare(self, node: nodes.Compare) -> nodes.Node:
        self.generic_visit(node)
        args: list[nodes.Expr] = []
        for operand in node.ops:
            args.append(nodes.Const(operand.op, lineno=node.lineno))
            args.append(operand.expr)
        return _internal(_COMPARE, node.expr, args, node.lineno)

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _internal(_CONCAT, node.nodes[0], list(node.nodes[1:]), node.lineno)

    def _container(self, node: nodes.Expr) -> nodes.Node:
        self.generic_visit(node)
        if getattr(node, "ctx", "load") != "load":
            return node
        return _internal(_CONTAINER, node, [], node.lineno)

    visit_List = visit_Tuple = visit_Dict = _container

    def visit_Getitem(self, node: nodes.Getitem) -> nodes.Node:
        self.generic_visit(node)
        if not isinstance(node.arg, nodes.Slice):
            return node
        part = node.arg
        args = [
            bound if bound is not None else nodes.Const(None, lineno=node.lineno)
            for bound in (part.start, part.stop, part.step)
        ]
        return _internal(_SLICE, node.node, args, node.lineno)


# -- shortcodes ------------------------------------------------------------------------------


def shortcodes(template: nodes.Template) -> set[str]:
    """Names the template reads from the substitution data: top-level names, and attribute
    paths as written (``user.first``). Names bound by the template itself (loop variables,
    ``set``, ``with``) are not data and are left out."""
    found: set[str] = set()
    _statements(template.body, set(), found)
    return found


def _targets(target: nodes.Node) -> set[str]:
    return {name.name for name in target.find_all(nodes.Name)} | (
        {target.name} if isinstance(target, nodes.Name) else set()
    )


def _statements(body: list[nodes.Node], declared: set[str], found: set[str]) -> None:
    for node in body:
        _statement(node, declared, found)


def _statement(node: nodes.Node, declared: set[str], found: set[str]) -> None:
    if isinstance(node, nodes.For):
        _expression(node.iter, declared, found)
        inner = declared | _targets(node.target) | {"loop"}
        if node.test is not None:
            _expression(node.test, inner, found)
        _statements(node.body, inner, found)
        _statements(node.else_, set(declared), found)
    elif isinstance(node, nodes.Assign):
        _expression(node.node, declared, found)
        declared |= _targets(node.target)
    elif isinstance(node, nodes.AssignBlock):
        if node.filter is not None:
            _expression(node.filter, declared, found)
        _statements(node.body, set(declared), found)
        declared |= _targets(node.target)
    elif isinstance(node, nodes.With):
        for value in node.values:
            _expression(value, declared, found)
        inner = set(declared)
        for target in node.targets:
            inner |= _targets(target)
        _statements(node.body, inner, found)
    elif isinstance(node, nodes.Expr):
        _expression(node, declared, found)
    else:
        # If, Output, FilterBlock, autoescape blocks: same scope (a set inside an if leaks out).
        for child in node.iter_child_nodes():
            _statement(child, declared, found)


def _expression(node: nodes.Node, declared: set[str], found: set[str]) -> None:
    if isinstance(node, nodes.Getattr):
        path = []
        current: nodes.Node = node
        while isinstance(current, nodes.Getattr):
            path.append(current.attr)
            current = current.node
        if isinstance(current, nodes.Name):
            if current.name not in declared:
                found.add(".".join([current.name, *reversed(path)]))
            return
        _expression(current, declared, found)
        return
    if isinstance(node, nodes.Name):
        if node.ctx == "load" and node.name not in declared:
            found.add(node.name)
        return
    if isinstance(node, nodes.Call) and _is_name(node.node, "range"):
        for child in node.iter_child_nodes():
            if child is not node.node:
                _expression(child, declared, found)
        return
    for child in node.iter_child_nodes():
        _expression(child, declared, found)
