"""The production path from a built wheel: installed (not editable) in a fresh virtualenv and
run from a directory holding no checkout files, `layang serve` and gunicorn on the packaged
entry points answer /healthz, and two servers on one host share nothing of gunicorn's.

Slow-ish (a wheel build and a virtualenv, ~15 s). The fresh virtualenv gets the wheel alone;
its dependencies are borrowed from the running environment through a path entry, so the test
needs no network (the borrowed directory's own .pth files, among them the editable checkout's,
are not processed).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import httpx
import pytest

from tests.delivery.test_crash import free_port, wait_until

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtualenv with Layang installed from a wheel built from the tracked files."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (item.decode() for item in tracked)):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    wheels = base / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels)]
    if can_build_wheels_here():
        build.append("--no-build-isolation")  # offline; else pip fetches setuptools and wheel
    subprocess.run([*build, str(source)], check=True, capture_output=True)
    (wheel,) = wheels.glob("layang-*.whl")

    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "borrowed-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    return env_dir


def can_build_wheels_here() -> bool:
    """Whether this environment's setuptools can build a wheel by itself (it includes
    bdist_wheel from 70.1 on; before, the wheel package provides it)."""
    if not importlib.util.find_spec("setuptools"):
        return False
    return bool(
        importlib.util.find_spec("wheel")
        or importlib.util.find_spec("setuptools.command.bdist_wheel")
    )


def clean_env(tmp_path: Path, **settings: object) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LAYANG_", "PYTHON", "VIRTUAL_ENV"))
    }
    env.update(LAYANG_DATA_DIR=str(tmp_path / "data"), LAYANG_HTTP_WORKERS="1")
    env.update({k: str(v) for k, v in settings.items()})
    return env


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).json() == {"status": "ok"}
    except (httpx.HTTPError, ValueError):
        return False


def start(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_the_wheel_holds_the_package_not_the_checkout(installed, tmp_path):
    where = subprocess.run(
        [
            installed / "bin" / "python",
            "-c",
            "import layang, templates_store; print(layang.__file__)",
        ],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(installed)), where
    assert not Path(where).is_relative_to(ROOT)


def test_layang_serve_from_the_wheel_answers_healthz(installed, tmp_path):
    """Twice at once on one host, with the same runtime dir: nothing shared between them."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    first, second = free_port(), free_port()
    servers = []
    try:
        for port in (first, second):
            env = clean_env(tmp_path, LAYANG_HTTP_BIND=f"127.0.0.1:{port}", XDG_RUNTIME_DIR=runtime)
            log = tmp_path / f"serve-{port}.log"
            servers.append(
                (start([installed / "bin" / "layang", "serve"], tmp_path, env, log), log)
            )
        for port, (_, log) in zip((first, second), servers, strict=True):
            wait_until(lambda port=port: healthy(port), 30, log.read_text())
        assert all(server.poll() is None for server, _ in servers)
        # gunicorn's control socket would be one path per user, taken over by the second.
        assert list(runtime.iterdir()) == []
    finally:
        for server, _ in servers:
            stop(server)
    assert not (tmp_path / "gunicorn.conf.py").exists() and not (tmp_path / "wsgi.py").exists()


def test_gunicorn_on_the_packaged_entry_points_answers_healthz(installed, tmp_path):
    port = free_port()
    env = clean_env(tmp_path, LAYANG_HTTP_BIND=f"127.0.0.1:{port}")
    command = [
        installed / "bin" / "python",
        "-m",
        "gunicorn",
        "-c",
        "python:layang.serving.gunicorn_conf",
        "layang.serving.wsgi:app",
    ]
    log = tmp_path / "gunicorn.log"
    server = start(command, tmp_path, env, log)
    try:
        wait_until(lambda: healthy(port), 30, log.read_text())
        assert f"Listening at: http://127.0.0.1:{port}" in log.read_text()
    finally:
        stop(server)


def test_gunicorn_with_a_wrong_setting_stops_with_one_line(installed, tmp_path):
    env = clean_env(tmp_path, LAYANG_DATABASE_URL="mysql://db/layang")
    result = subprocess.run(
        [
            installed / "bin" / "python",
            "-m",
            "gunicorn",
            "-c",
            "python:layang.serving.gunicorn_conf",
            "layang.serving.wsgi:app",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "LAYANG_DATABASE_URL: mysql:// is not supported, only sqlite:// (sqlite:///path/layang.db,"
        " the default) and postgresql:// (postgresql://user:password@host/database)"
    ]
