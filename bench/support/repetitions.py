"""Repeated measurements: each retried when the machine's PostgreSQL went away under it (others
may restart it meanwhile), and their median with the range."""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable
from typing import TypeVar

import peewee
import psycopg2

from bench.support.latency_sink import Interrupted
from bench.support.layang_run import wait_for_database

T = TypeVar("T")


def retrying(label: str, measure: Callable[[], T], notes: list[str], admin_url: str) -> T:
    """``measure()``, again (up to three times) when the database went away or the worker
    exited under it: the machine's PostgreSQL may be restarted by others meanwhile."""
    from layang.db import database

    for attempt in range(3):
        try:
            return measure()
        except (Interrupted, peewee.PeeweeException, psycopg2.Error) as error:
            if attempt == 2:
                raise
            notes.append(f"{label}: measured again after {type(error).__name__}: {error}")
            print(f"  {label}: {type(error).__name__}, waiting for the database", flush=True)
            with contextlib.suppress(peewee.PeeweeException, psycopg2.Error):
                database.close()
            wait_for_database(admin_url)
    raise AssertionError("unreachable")


def spread(values: list[float], digits: int = 2) -> str:
    """``median [min-max]`` of ``values``."""
    return (
        f"{statistics.median(values):6.{digits}f} "
        f"[{min(values):.{digits}f}-{max(values):.{digits}f}]"
    )
