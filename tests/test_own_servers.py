"""No test drives a server it did not start: the machine's PostgreSQL (and any other service)
is never stopped, restarted or reconfigured by the suite; outage tests use a throwaway server of
their own (``tests/postgres/server.py``, ``own_postgres``)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# Commands and statements that stop, restart or reconfigure a server, or end others' sessions.
DRIVING = re.compile(
    r"pg_ctlcluster|systemctl|\bservice\s+postgresql|pg_terminate_backend|ALTER\s+SYSTEM"
    r"|pg_reload_conf|redis-cli|\bshutdown\b.*redis",
    re.IGNORECASE,
)


def owns_its_postgres(text: str) -> bool:
    """Whether a test module runs on the tests' own throwaway server only."""
    return "own_postgres" in text


def test_no_test_drives_a_server_it_did_not_start():
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__).resolve():
            continue
        text = path.read_text()
        for number, line in enumerate(text.splitlines(), 1):
            if DRIVING.search(line) and not owns_its_postgres(text):
                offenders.append(f"{path.relative_to(TESTS)}:{number}: {line.strip()}")
    assert offenders == []
