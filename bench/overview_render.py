"""What the Overview costs a browser: page weight (every byte fetched) and render time in
headless Chromium, for each period. The charts are server-side SVG, so the figures hold at any
number of records (the page's size depends on the chart's points, not on the data); the
server's side at 1,000,000 records is bench/overview.py.

    python bench/overview_render.py [--records 20000] [--rounds 15]

Needs Debian's chromium (apt-get install chromium) and Playwright, as the browser tests do.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from werkzeug.serving import make_server  # noqa: E402

from bench.overview import fill  # noqa: E402
from layang.config import Config  # noqa: E402
from layang.domain import accounts  # noqa: E402
from layang.serving.app import create_app  # noqa: E402
from tests.support.browser import CHROMIUM_FLAGS, chromium_path  # noqa: E402

# Every resource the page fetched, and when it was drawn.
MEASURE = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const resources = performance.getEntriesByType('resource');
  return {
    html: nav.encodedBodySize,
    resources: resources.reduce((sum, r) => sum + r.encodedBodySize, 0),
    names: resources.map(r => r.name.split('/').pop()),
    domContentLoaded: nav.domContentLoadedEventEnd,
    load: nav.loadEventEnd,
    svgElements: document.querySelectorAll('svg *').length,
  };
}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        config = Config(
            data_dir=Path(tmp),
            database_url=f"sqlite:///{tmp}/render.db",
            relay_url=f"capture:{tmp}/out",
            public_url="http://127.0.0.1:8000",
            secret_key="bench-secret-key",
        )
        app = create_app(config)
        with app.app_context():
            account = accounts.create_account("render", live=True)
            key = accounts.create_api_key(account)[1]
            fill(account.id, args.records, int(time.time() * 1000), random.Random(3))
        server = make_server("127.0.0.1", 0, app, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_port}"
        results = {}
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS
                )
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(base + "/console/login")
                page.fill("input[type=password]", key)
                page.get_by_role("button", name="Sign in").click()
                page.wait_for_load_state()
                for period in ("24h", "7d", "30d"):
                    runs = []
                    for _ in range(args.rounds):
                        # A fresh load each time, the stylesheet from the cache as a reader has it.
                        page.goto(f"{base}/console/overview?period={period}")
                        page.wait_for_load_state("load")
                        runs.append(page.evaluate(MEASURE))
                    first = runs[0]
                    static = ROOT / "layang" / "web" / "static"
                    results[period] = {
                        "html_bytes": first["html"],
                        # Cached after the first page: counted from the files themselves.
                        "static_bytes": sum((static / n).stat().st_size for n in first["names"]),
                        "fetched": first["names"],
                        "svg_elements": first["svgElements"],
                        "dom_content_loaded_ms": round(
                            statistics.median(r["domContentLoaded"] for r in runs), 1
                        ),
                        "load_ms": round(statistics.median(r["load"] for r in runs), 1),
                    }
                browser.close()
        finally:
            server.shutdown()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
