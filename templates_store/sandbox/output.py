"""How values are written into a rendered part, each output charged to the render's budget."""

from __future__ import annotations

import json
from typing import Any

from jinja2 import Undefined, pass_context

from templates_store.sandbox.budget import BudgetContext


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
