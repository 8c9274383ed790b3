"""What one render may spend: the :class:`RenderLimits`, the per-render :class:`Budget` that
charges against them, and the render context that carries it."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from jinja2.runtime import Context


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
