"""What a client uses when not told: its timeouts, retry policy and page size, the service it
talks to, and the User-Agent it sends."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from importlib import metadata as importlib_metadata

import httpx

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
_LISTEN_ON_ALL = frozenset(("0.0.0.0", "::", ""))  # noqa: S104 - compared against, never bound
DEFAULT_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRY_BACKOFF = 0.5
DEFAULT_MAX_RETRY_WAIT = 30.0
DEFAULT_PAGE_SIZE = 100


def _package_version() -> str:
    try:
        return importlib_metadata.version("layang")
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


__version__ = _package_version()
USER_AGENT = (
    f"layang-python/{__version__} httpx/{httpx.__version__} python/{platform.python_version()}"
)


def url_of_bind(bind: str) -> str:
    """``http://`` + a service's listen address (``host:port``), with a listen-on-all address
    replaced by the loopback one, which a local client can connect to."""
    host, _, port = bind.rpartition(":")
    host = host.strip("[]")
    if host in _LISTEN_ON_ALL:
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def default_base_url(environ: Mapping[str, str] | None = None) -> str:
    """The service a client talks to when not told: ``$LAYANG_BASE_URL``, else the service on
    this machine at ``$LAYANG_HTTP_BIND``, else ``http://127.0.0.1:8000``."""
    environ = os.environ if environ is None else environ
    if environ.get("LAYANG_BASE_URL"):
        return environ["LAYANG_BASE_URL"]
    if environ.get("LAYANG_HTTP_BIND"):
        return url_of_bind(environ["LAYANG_HTTP_BIND"])
    return DEFAULT_BASE_URL
