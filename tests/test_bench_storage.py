"""bench/storage.py at a small scale: content expiry shrinks what a delivered message costs."""

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
def test_content_expiry_shrinks_what_a_message_costs(backend, request):
    if backend == "postgresql":
        request.getfixturevalue("postgres_database")  # skips when there is no server
    done = subprocess.run(
        [
            sys.executable,
            "bench/storage.py",
            *("--messages", "100", "--retention-days", "3", "--content-days", "1"),
            *("--backend", backend, "--admin-url", ADMIN_URL),
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
