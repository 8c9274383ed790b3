"""Operations: health, the OpenAPI document and its offline docs page, gunicorn, logs."""

from __future__ import annotations

import logging
import re
import subprocess
import sys

import httpx

from tests.delivery.test_crash import (
    ROOT,
    _healthy,
    free_port,
    process_env,
    stop,
    wait_until,
)
from tests.delivery.test_crash import start as start_process
from tests.support.browser import screenshot


def test_healthz(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


def test_openapi_documents_the_api_and_the_error_body(client):
    spec = client.get("/openapi.json").get_json()
    assert spec["openapi"].startswith("3.")
    assert "/v1/layang/transmissions" in spec["paths"]
    assert "/v1/layang/activity" in spec["paths"]
    post = spec["paths"]["/v1/layang/transmissions"]["post"]
    assert "200" in post["responses"]
    assert "default" in post["responses"]
    error = spec["components"]["schemas"]["Error"]
    assert set(error["properties"]) == {"error", "message", "status", "errors"}
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    request = spec["components"]["schemas"]["TransmissionRequest"]
    assert "from" in request["properties"]


def test_docs_page_needs_no_network(client):
    page = client.get("/docs")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets
    for asset in assets:
        assert asset.startswith("/docs/"), asset  # nothing from a CDN
        with client.get(asset) as response:
            assert response.status_code == 200


def test_docs_page_shows_every_operation_in_a_browser_offline(client, browser, live_server):
    spec = client.get("/openapi.json").get_json()
    operations = [
        f"{method.upper()} {path}"
        for path, item in spec["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    ]
    assert "POST /v1/layang/transmissions" in operations
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    outside = []

    def only_the_server(route):
        if route.request.url.startswith(live_server + "/"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_server)
    page = context.new_page()
    blocked = []
    page.on(
        "console",
        lambda message: (
            blocked.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    page.goto(live_server + "/docs")
    page.wait_for_selector(".opblock", timeout=15000)
    assert spec["info"]["title"] in page.locator(".info .title").inner_text()
    shown = {
        " ".join(
            block.locator(sel).first.inner_text().strip()
            for sel in (".opblock-summary-method", ".opblock-summary-path")
        )
        for block in page.locator(".opblock").all()
    }
    shown = {text.replace("\u200b", "") for text in shown}
    missing = [operation for operation in operations if operation not in shown]
    assert not missing, missing
    assert not outside and not blocked, (outside, blocked)
    screenshot(page, "docs")
    context.close()


def test_logs_name_the_transmission_and_never_the_key(
    client, auth, api_key, caplog, upstream, relay_to
):
    from tests.conftest import drain

    caplog.set_level(logging.DEBUG, logger="layang")
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "a@sender.test"},
            "subject": "s",
            "to": [{"email": "b@rcpt.test"}],
            "bodyText": "t",
        },
    )
    tid = response.get_json()["transmissionId"]
    drain(relay_to(upstream))
    lines = [r.getMessage() for r in caplog.records]
    assert any(f"tid={tid}" in line and line.startswith("accepted") for line in lines)
    deliveries = [r for r in caplog.records if r.getMessage().startswith(f"Delivery tid={tid}")]
    assert [(r.levelname, r.name) for r in deliveries] == [("INFO", "layang.outcomes")]
    assert not any(api_key in line or api_key[4:20] in line for line in lines)


def test_a_worker_at_the_default_level_logs_one_line_per_attempt_outcome(
    client, auth, config, upstream, tmp_path
):
    """CONTRACT section 24: Delivery, Delay and Bounce each a line with the transmission id,
    the recipient and the reply code, from a real ``layang worker`` at its default level."""
    upstream.script_rcpt("later@rcpt.test", "451 4.3.0 Try again later")
    upstream.script_rcpt("gone@rcpt.test", "550 5.1.1 No such user")
    tids = {}
    for address in ("ana@rcpt.test", "later@rcpt.test", "gone@rcpt.test"):
        response = client.post(
            "/v1/layang/transmissions",
            headers=auth,
            json={
                "from": {"email": "a@sender.test"},
                "subject": "s",
                "to": [{"email": address}],
                "bodyText": "t",
            },
        )
        tids[address] = response.get_json()["transmissionId"]
    log_path = tmp_path / "worker.log"
    env = process_env(config, LAYANG_RELAY_URL=upstream.url, LAYANG_RETRY_BASE_SECONDS=3600)
    worker = start_process(["worker", "--processes", "1"], env, log_path)
    expected = {
        "Delivery": ("ana@rcpt.test", "250"),
        "Delay": ("later@rcpt.test", "451"),
        "Bounce": ("gone@rcpt.test", "550"),
    }

    def outcome_lines():
        return [
            line for line in log_path.read_text().splitlines() if " INFO layang.outcomes " in line
        ]

    try:
        wait_until(lambda: len(outcome_lines()) >= 3, 60, lambda: log_path.read_text())
    finally:
        stop(worker)
    lines = outcome_lines()
    assert len(lines) == 3, lines
    for status, (address, code) in expected.items():
        (line,) = [line for line in lines if f" {status} tid=" in line]
        assert f"tid={tids[address]} " in line and f"rcpt={address} " in line, line
        assert f"code={code} " in line and "reply=" in line, line


def test_outcome_lines_can_show_recipients_hashed(client, auth, config, caplog, upstream, relay_to):
    import hashlib

    from tests.conftest import drain

    caplog.set_level(logging.INFO, logger="layang")
    client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "a@sender.test"},
            "subject": "s",
            "to": [{"email": "Ana@rcpt.test"}],
            "bodyText": "t",
        },
    )
    drain(relay_to(upstream, log_recipients="hash"))
    (line,) = [r.getMessage() for r in caplog.records if r.name == "layang.outcomes"]
    digest = hashlib.sha256(b"ana@rcpt.test").hexdigest()[:16]
    assert f"rcpt=sha256:{digest} " in line and "ana@" not in line.lower()


def start_gunicorn(env, log_path):
    """The documented production command, ``gunicorn -c gunicorn.conf.py wsgi:app``."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def test_gunicorn_serves_wsgi_app(config, api_key, tmp_path):
    port = free_port()
    env = process_env(config, LAYANG_HTTP_BIND=f"127.0.0.1:{port}", LAYANG_HTTP_WORKERS=2)
    server = start_gunicorn(env, tmp_path / "gunicorn.log")
    try:
        wait_until(lambda: _healthy(port), 30, (tmp_path / "gunicorn.log").read_text())
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/layang/transmissions",
            headers={"Authorization": f"Bearer {api_key}"},
            json={
                "from": {"email": "a@sender.test"},
                "subject": "s",
                "to": [{"email": "b@rcpt.test"}],
                "bodyText": "t",
            },
        )
        assert response.status_code == 200, response.text
        bad = httpx.post(f"http://127.0.0.1:{port}/v1/layang/transmissions", json={})
        assert bad.status_code == 401
        assert bad.json()["error"] == "unauthorized"
    finally:
        stop(server)
    output = (tmp_path / "gunicorn.log").read_text()
    assert api_key not in output


def test_a_body_past_the_limit_is_answered_413_by_a_real_server(config, api_key, tmp_path):
    """Not a connection reset: the answer reaches a client still sending, whether the body
    declares its length or comes in chunks."""
    port = free_port()
    env = process_env(config, LAYANG_HTTP_BIND=f"127.0.0.1:{port}", LAYANG_HTTP_WORKERS=1)
    server = start_gunicorn(env, tmp_path / "gunicorn.log")
    big = b'{"bodyText": "' + b"a" * (42 * 1024 * 1024) + b'"}'

    def chunks():
        for start in range(0, len(big), 1 << 20):
            yield big[start : start + (1 << 20)]

    try:
        wait_until(lambda: _healthy(port), 30, (tmp_path / "gunicorn.log").read_text())
        for content in (big, chunks()):
            response = httpx.post(
                f"http://127.0.0.1:{port}/v1/layang/transmissions",
                headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
                content=content,
                timeout=60,
            )
            assert response.status_code == 413, response.text
            assert response.json()["error"] == "payload_too_large"
            assert "LAYANG_MAX_MESSAGE_BYTES=26214400" in response.json()["message"]
    finally:
        stop(server)
