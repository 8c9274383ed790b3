"""Operations the compiler routes through the budget: loop steps, comparisons, concatenation,
literals and slices, as internal filters a template cannot name."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from typing import Any

from jinja2 import Undefined, pass_context
from jinja2.runtime import markup_join, str_join

from templates_store.sandbox.budget import Budget, BudgetContext, LimitExceeded
from templates_store.sandbox.filters import _as_text

# Names of the internal filters the compiler inserts. They contain a colon, which the template
# lexer never produces, so a template cannot name them.
_ITERATE = "layang:iterate"
_COMPARE = "layang:compare"
_CONCAT = "layang:concat"
_CONTAINER = "layang:container"
_SLICE = "layang:slice"


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
