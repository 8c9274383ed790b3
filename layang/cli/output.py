"""What a ``layang`` command prints: its result as JSON on stdout (``emit``), and a domain
error as the API's error body on stderr (``domain_errors``)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from layang.api.errors import describe
from layang.domain.errors import LayangError


def emit(value: Any) -> None:
    """Print ``value`` as one line of JSON on stdout."""
    click.echo(json.dumps(value))


class domain_errors:
    """Print a domain error as the API's error body (docs/api.md, "Errors") on stderr and exit 1."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, tb: Any) -> bool:
        if isinstance(error, LayangError):
            click.echo(json.dumps(describe(error).body()), err=True)
            sys.exit(1)
        return False
