"""Concurrent opens and clicks of one mail: every fetch is counted once, and only one Open is
the first, however many request threads and processes record them at once. About PostgreSQL;
SQLite, whose writers take turns, is checked alongside."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from layang.mail.tracking import Tracker
from tests.conftest import BACKENDS
from tests.delivery.test_crash import _healthy, free_port, process_env, start, stop, wait_until

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

THREADS = 16
ROUNDS = 15


def test_concurrent_opens_and_clicks_are_all_counted_and_one_open_is_first(
    config, api_key, tmp_path
):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {api_key}"}
    server = start(
        ["serve"],
        process_env(config, LAYANG_HTTP_BIND=f"127.0.0.1:{port}", LAYANG_HTTP_WORKERS=2),
        tmp_path / "serve.log",
    )
    try:
        wait_until(lambda: _healthy(port), 30, "the API did not come up")
        sent = httpx.post(
            f"{base}/v1/layang/transmissions",
            headers=auth,
            json={
                "from": {"email": "shop@sender.test"},
                "subject": "s",
                "to": [{"email": "ana@rcpt.test"}],
                "bodyHtml": "<p>hi</p>",
            },
        )
        tid = sent.json()["transmissionId"]
        activity = httpx.get(f"{base}/v1/layang/activity?transmissionId={tid}", headers=auth)
        recipient_id = activity.json()["items"][0]["id"]
        tracker = Tracker(config.secret_key, base)
        pixel = tracker.open_url(recipient_id)
        link = tracker.click_url(recipient_id, "https://shop.test/")
        start_together = threading.Barrier(THREADS)

        def fetch(_: int) -> list[int]:
            with httpx.Client() as http:
                start_together.wait()
                return [
                    status
                    for _ in range(ROUNDS)
                    for status in (
                        http.get(pixel).status_code,
                        http.get(link, follow_redirects=False).status_code,
                    )
                ]

        with ThreadPoolExecutor(THREADS) as pool:
            statuses = [s for result in pool.map(fetch, range(THREADS)) for s in result]
        assert statuses.count(200) == statuses.count(302) == THREADS * ROUNDS

        record = httpx.get(f"{base}/v1/layang/transmissions/{tid}", headers=auth).json()
    finally:
        stop(server)
    events = record["recipients"][0]["events"]
    opens = [e["detail"] for e in events if e["status"] == "Open"]
    clicks = [e["detail"] for e in events if e["status"] == "Click"]
    assert sum(d.get("count", 1) for d in opens) == THREADS * ROUNDS, opens
    assert sum(d.get("count", 1) for d in clicks) == THREADS * ROUNDS, clicks
    assert [d["first"] for d in opens].count(True) == 1, opens
    assert len(opens) == len(clicks) == 1  # all within one window: one event each
