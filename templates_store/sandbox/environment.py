"""The locked-down Jinja environment: what attribute and item access and arithmetic may reach."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jinja2 import Undefined
from jinja2 import filters as jinja_filters
from jinja2.runtime import Context, LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import _PassArg

from templates_store.sandbox.budget import Budget, BudgetContext, LimitExceeded
from templates_store.sandbox.filters import _PUBLIC_FILTERS, _PUBLIC_TESTS
from templates_store.sandbox.operations import _INTERNAL_FILTERS
from templates_store.sandbox.output import _finalize

HTML_PART = "bodyHtml"


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


def _autoescape(template_name: str | None) -> bool:
    return template_name == HTML_PART


class SandboxEnvironment(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, narrowed further (see :mod:`templates_store.sandbox`)."""

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
