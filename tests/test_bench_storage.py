"""bench/storage.py at a small scale: content expiry shrinks what a delivered message costs, and
the database stops growing once the retention period has passed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BACKENDS
from tests.postgres.server import ADMIN_URL

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_storage_stops_growing_after_the_retention_period(backend, request):
    if backend == "postgresql":
        request.getfixturevalue("postgres_database")  # skips when there is no server
    done = subprocess.run(
        [
            sys.executable,
            "bench/storage.py",
            *("--messages", "100", "--per-day", "10", "--days", "10", "--every", "1"),
            *("--retention-days", "3", "--content-days", "1", "--backend", backend),
            *("--admin-url", ADMIN_URL),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["contentsExpired"] == 100
    assert result["bytesPerMessageContentExpired"] < result["bytesPerMessageContentKept"] / 2
    later = [day for day in result["sizeByDay"] if day["day"] >= 5]
    # Each day's mail is sent, then the clock moves a day on: the mail of the last 3 days is
    # kept, the oldest of which turned 3 days old as the day ended.
    assert {day["records"] for day in later} == {20}
    sizes = [day["bytes"] for day in later]
    assert max(sizes) <= min(sizes) * 1.1, result["sizeByDay"]
    first = result["sizeByDay"][0]
    assert first["records"] == 10 and first["bytes"] <= min(sizes)
