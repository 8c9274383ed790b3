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

Where each part lives: ``environment`` (the environment and what it lets a template reach),
``budget`` (the limits and what a render spends), ``filters``, ``operations`` (what the compiler
routes through the budget), ``output`` (values as text), ``checks`` and ``instrument`` (what
compiling refuses and rewrites) and ``shortcodes`` (the data names a template reads).
"""

from templates_store.sandbox.budget import Budget, BudgetContext, LimitExceeded, RenderLimits
from templates_store.sandbox.checks import Refused, check
from templates_store.sandbox.environment import (
    HTML_PART,
    LOOP_METHODS,
    LOOP_VALUE_ATTRIBUTES,
    SandboxEnvironment,
)
from templates_store.sandbox.filters import PUBLIC_FILTER_NAMES
from templates_store.sandbox.instrument import Instrument
from templates_store.sandbox.output import to_text
from templates_store.sandbox.shortcodes import shortcodes

__all__ = [
    "HTML_PART",
    "LOOP_METHODS",
    "LOOP_VALUE_ATTRIBUTES",
    "PUBLIC_FILTER_NAMES",
    "Budget",
    "BudgetContext",
    "Instrument",
    "LimitExceeded",
    "Refused",
    "RenderLimits",
    "SandboxEnvironment",
    "check",
    "shortcodes",
    "to_text",
]
