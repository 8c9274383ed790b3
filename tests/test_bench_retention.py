"""bench/retention.py at a small scale: the database stops growing once the retention period
has passed."""

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
    # PostgreSQL drops history a week at a time: long enough to see two drops.
    days = 10 if backend == "sqlite" else 24
    done = subprocess.run(
        [
            sys.executable,
            "bench/retention.py",
            *("--per-day", "10", "--days", str(days), "--every", "1"),
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
    first = result["sizeByDay"][0]
    assert first["records"] == 10
    if backend == "sqlite":
        later = [day for day in result["sizeByDay"] if day["day"] >= 5]
        # Each day's mail is sent, then the clock moves a day on: the mail of the last 3 days
        # is kept, the oldest of which turned 3 days old as the day ended.
        assert {day["records"] for day in later} == {20}
        sizes = [day["bytes"] for day in later]
        assert max(sizes) <= min(sizes) * 1.1, result["sizeByDay"]
        assert first["bytes"] <= min(sizes)
        return
    # The mail of the last 3 days, and at most the rest of the week the oldest of it is in:
    # a week goes once it ended 3 days ago.
    later = [day for day in result["sizeByDay"] if day["day"] >= 10]
    assert all(20 <= day["records"] <= (3 + 7) * 10 for day in later), result["sizeByDay"]
    assert min(day["records"] for day in later) <= 40  # a drop happened
    # Growth stops: the third week's largest size is no larger than the second's.
    second = max(day["bytes"] for day in result["sizeByDay"] if 10 <= day["day"] <= 16)
    third = max(day["bytes"] for day in result["sizeByDay"] if 17 <= day["day"] <= 24)
    assert third <= second * 1.1, result["sizeByDay"]
