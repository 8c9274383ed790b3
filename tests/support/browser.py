"""Headless Chromium (Debian's package) driven by Playwright, and a live server to point it at."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from werkzeug.serving import make_server

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("LAYANG_REQUIRE_TOOLS"):
            pytest.fail("Chromium is required here (apt-get install chromium)")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    return path


@pytest.fixture
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_FLAGS
        )
        yield instance
        instance.close()


@pytest.fixture
def live_server(app) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(10)
    server.server_close()


def screenshot(page: object, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


# Reports what sticks out of its box on the page as drawn.
_OVERFLOW_JS = """(tablesScroll) => {
  const found = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth) found.push(`page ${root.scrollWidth}px`);
  for (const el of document.querySelectorAll('main *')) {
    const parent = el.parentElement;
    if (!parent || getComputedStyle(parent).overflowX !== 'visible') continue;
    if (el.closest('.table-scroll')) continue;
    const box = parent.getBoundingClientRect(), mine = el.getBoundingClientRect();
    if (mine.width && mine.right > box.right + 1)
      found.push(`${el.tagName}.${el.className} ${Math.round(mine.right - box.right)}px`);
  }
  if (!tablesScroll)
    for (const el of document.querySelectorAll('.table-scroll'))
      if (el.scrollWidth > el.clientWidth + 1)
        found.push(`table ${el.firstElementChild.className} scrolls`);
  return found;
}"""


def overflow(page: object, tables_scroll: bool = False) -> list[str]:
    """What the user would find clipped: the page wider than the window, an element wider than
    its box, or (unless ``tables_scroll``, as on a phone) a table scrolling inside its box."""
    return page.evaluate(_OVERFLOW_JS, tables_scroll)
