"""The SDK needs only httpx: it imports in a fresh virtual environment without the service's
dependencies, and pulls none of them in."""

from __future__ import annotations

import os
import re
import subprocess
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import importlib.util, sys
sys.path.insert(0, sys.argv[1])
from layang.client import Layang, LayangError, USER_AGENT, verify_webhook
with Layang("lyg_x", base_url="http://127.0.0.1:9") as client:
    assert repr(client) == "Layang(base_url='http://127.0.0.1:9')"
for name in ("flask", "peewee", "marshmallow", "jinja2", "click"):
    assert name not in sys.modules, name
for name in ("flask", "peewee", "marshmallow"):
    assert importlib.util.find_spec(name) is None, name
assert issubclass(LayangError, Exception)
print(USER_AGENT)
"""


def test_imports_with_only_httpx(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    clean = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    }
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "httpx"],
        capture_output=True, text=True, env=clean, timeout=180,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    probe = subprocess.run(
        [python, "-c", PROBE, str(REPO)], capture_output=True, text=True, env=clean, timeout=60
    )
    assert probe.returncode == 0, probe.stderr
    assert re.fullmatch(r"layang-python/\S+ httpx/\S+ python/\S+\n", probe.stdout), probe.stdout
