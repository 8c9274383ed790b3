"""What large sends cost an API process: a send's peak memory is about twice its body, on SQLite
and PostgreSQL, and bodies over 1 MiB are admitted under the process's budget
(``LAYANG_HTTP_BODY_BUDGET_MB``), which charges them that: a request that finds no room waits,
then gets 503 with ``Retry-After``."""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time
import tracemalloc
from pathlib import Path

import httpx
import pytest

from layang.serving import body_budget
from layang.serving.body_budget import MIB, BodyBudget, process_budget
from tests.conftest import BACKENDS
from tests.delivery.test_crash import (
    _healthy,
    child_pids,
    free_port,
    process_env,
    start,
    stop,
    wait_until,
)

URL = "/v1/layang/transmissions"


def send_body(mib: float) -> bytes:
    content = base64.b64encode(os.urandom(int(mib * MIB * 3 / 4))).decode()
    return json.dumps(
        {
            "from": {"email": "shop@sender.test"},
            "to": [{"email": "ana@rcpt.test"}],
            "subject": "A large attachment",
            "bodyText": "See the attachment.",
            "attachments": [{"filename": "data.bin", "value": content}],
        }
    ).encode()


PEAK_PER_BODY_BYTE = 2.2
"""docs/deploy.md's "about twice its body", with room for what a request needs besides."""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "idempotency-key"])
def test_a_large_send_peaks_at_about_twice_its_body(client, auth, keyed):
    """What Python allocates for one send, from the body read to the answer."""
    body = send_body(8)
    headers = {**auth, "Content-Type": "application/json"}
    if keyed:
        headers["Idempotency-Key"] = "large-send"
    assert client.post(URL, data=b"{}", headers=headers).status_code == 400  # warm up
    tracemalloc.start()
    try:
        response = client.post(URL, data=body, headers=headers)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert response.status_code == 200, response.get_json()
    assert peak <= PEAK_PER_BODY_BYTE * len(body), f"peak {peak / len(body):.2f} x the body"


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the resident peak) of process ``pid``, in bytes."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(value.split()[0]) * 1024
    return values


@pytest.mark.parametrize("backend", BACKENDS)
def test_layang_serve_peaks_at_about_twice_a_large_body_and_charges_that(config, api_key, tmp_path):
    """The whole process's resident memory, the database driver's copies and the HTTP front's
    buffers included: what the body budget is there to bound."""
    port = free_port()
    env = process_env(config, LAYANG_HTTP_BIND=f"127.0.0.1:{port}", LAYANG_HTTP_WORKERS="1")
    process = start(["serve"], env, tmp_path / "serve.log")
    try:
        wait_until(lambda: _healthy(port), 30, "the API did not come up")
        (worker,) = child_pids(process.pid)
        body = send_body(24)

        def send(**headers: str) -> int:
            headers = {"Authorization": f"Bearer {api_key}", **headers}
            headers["Content-Type"] = "application/json"
            url = f"http://127.0.0.1:{port}{URL}"
            return httpx.post(url, content=body, headers=headers, timeout=120).status_code

        started_with = memory(worker)["VmRSS"]
        # A process's first large send also grows what it keeps for every later one.
        assert send() == 200
        for headers in ({}, {"Idempotency-Key": "large-send"}):
            Path(f"/proc/{worker}/clear_refs").write_text("5")  # VmHWM starts again at VmRSS
            before = memory(worker)["VmRSS"]
            assert send(**headers) == 200
            peak = memory(worker)["VmHWM"] - before
            assert peak <= PEAK_PER_BODY_BYTE * len(body), (
                f"{headers}: peak {peak / len(body):.2f} x the body"
            )
            # The budget charges what a send takes (within a tenth).
            assert peak <= 1.1 * BodyBudget.cost(len(body))

        # Once no large request is in flight, what they took goes back to the system, the
        # database's pages of them included.
        def given_back() -> bool:
            return memory(worker)["VmRSS"] - started_with <= len(body) / 4

        wait_until(given_back, 10, "the large sends' memory was kept")
    finally:
        stop(process)


def test_a_large_body_waits_for_room_then_gets_503_with_retry_after(
    app, client, auth, config, monkeypatch
):
    monkeypatch.setattr(body_budget, "WAIT_SECONDS", 0.5)
    budget = process_budget(config.http_body_budget_mb * MIB)
    body = send_body(2)
    headers = {**auth, "Content-Type": "application/json"}
    holding = budget.limit  # another request holds all of it
    assert budget.take(holding)
    try:
        refused = client.post(URL, data=body, headers=headers)
        small = client.post(URL, data=send_body(0.1), headers=headers)
    finally:
        budget.give_back(holding)
    assert refused.status_code == 503
    assert refused.headers["Retry-After"] == "5"
    answer = refused.get_json()
    assert answer["error"] == "service_unavailable" and answer["status"] == 503
    assert "LAYANG_HTTP_BODY_BUDGET_MB" in answer["message"]
    assert small.status_code == 200  # small bodies never wait
    # Once the room is given back, a large body goes through, and gives its room back.
    assert client.post(URL, data=body, headers=headers).status_code == 200
    assert budget.in_use == 0


def http_request(port: int, body: bytes, key: str) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = (
        f"POST {URL} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return sock, head


def read_answer(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        if b"\r\n\r\n" in b"".join(chunks):
            head, _, rest = b"".join(chunks).partition(b"\r\n\r\n")
            length = int(
                next(
                    line.split(b":", 1)[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
            )
            if len(rest) >= length:
                return b"".join(chunks)


def test_layang_serve_parks_a_large_body_unread_until_it_has_room(config, api_key, tmp_path):
    port = free_port()
    env = process_env(
        config,
        LAYANG_HTTP_BIND=f"127.0.0.1:{port}",
        LAYANG_HTTP_BODY_BUDGET_MB="1",
        LAYANG_HTTP_WORKERS="1",  # the budget is per process
    )
    process = start(["serve"], env, tmp_path / "serve.log")
    sockets: list[socket.socket] = []
    try:
        wait_until(lambda: _healthy(port), 30, "the API did not come up")
        body = send_body(2)
        # The first large body takes the whole budget, and is sent slowly.
        first, head = http_request(port, body, api_key)
        sockets.append(first)
        first.sendall(head + body[: len(body) // 2])
        time.sleep(0.5)
        second, head = http_request(port, body, api_key)
        sockets.append(second)
        started = time.monotonic()
        sender = threading.Thread(target=lambda: second.sendall(head + body))
        sender.start()
        answer = read_answer(second)
        waited = time.monotonic() - started
        sender.join(timeout=30)
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b"Retry-After: 5" in answer and b"LAYANG_HTTP_BODY_BUDGET_MB" in answer
        assert waited >= body_budget.WAIT_SECONDS - 1
        first.sendall(body[len(body) // 2 :])
        assert read_answer(first).startswith(b"HTTP/1.1 200")
        # With the room given back, the next large body goes straight through.
        third, head = http_request(port, body, api_key)
        sockets.append(third)
        third.sendall(head + body)
        assert read_answer(third).startswith(b"HTTP/1.1 200")
    finally:
        for sock in sockets:
            sock.close()
        stop(process)


@pytest.fixture(autouse=True)
def _budget_left_empty(config):
    yield
    assert process_budget(config.http_body_budget_mb * MIB).in_use == 0
