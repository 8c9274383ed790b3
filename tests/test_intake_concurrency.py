"""Real `layang serve` processes on the embedded SQLite default, written to by many clients at
once: ordinary concurrent use never gets a 503 or "database is locked" (docs/api.md, "Errors"), and
a message answered 200 is stored even if the server dies the next instant (docs/api.md,
"Sending")."""

from __future__ import annotations

import collections
import itertools
import threading
import time

import httpx

from layang.domain import accounts
from layang.models import Recipient, Transmission
from tests.delivery.test_crash import _healthy, free_port, kill_server, process_env, start, stop
from tests.delivery.test_crash import wait_until as wait_for

CLIENTS = 16


def serve(config, tmp_path, **settings):
    port = free_port()
    env = process_env(
        config, LAYANG_HTTP_BIND=f"127.0.0.1:{port}", LAYANG_LOG_LEVEL="INFO", **settings
    )
    server = start(["serve"], env, tmp_path / "api.log")
    wait_for(lambda: _healthy(port), 30, "the API did not come up")
    return server, f"http://127.0.0.1:{port}"


def transmission(subject):
    return {
        "from": {"email": "shop@sender.test"},
        "subject": subject,
        "to": [{"email": "ana@rcpt.test"}, {"email": "ben@rcpt.test"}],
        "bodyText": "hello {{name}}",
    }


class Mix:
    """One client's round of every write endpoint, and reads between them; each client uses
    its own template ids and addresses, so every call should succeed."""

    def __init__(self, base, live_key, sandbox_key, client_number):
        self.http = httpx.Client(base_url=base, timeout=60)
        self.live = {"Authorization": f"Bearer {live_key}"}
        self.sandbox = {"Authorization": f"Bearer {sandbox_key}"}
        self.name = f"c{client_number}"
        self.statuses: collections.Counter[tuple[str, int]] = collections.Counter()

    def call(self, label, method, url, headers, **kwargs):
        response = self.http.request(method, url, headers=headers, **kwargs)
        self.statuses[(label, response.status_code)] += 1
        return response

    def round(self, n):
        tid = f"{self.name}-{n}"
        templates = "/v1/layang/templates"
        recipients = "/v1/layang/sandbox/authorized-recipients"
        self.call("send", "POST", "/v1/layang/transmissions", self.live, json=transmission(tid))
        self.call(
            "create template",
            "POST",
            templates,
            self.live,
            json={"id": tid, "name": tid, "subject": "Hi {{name}}", "bodyText": "t {{name}}"},
        )
        self.call("update template", "PUT", f"{templates}/{tid}", self.live, json={"name": "x"})
        self.call(
            "preview",
            "POST",
            f"{templates}/{tid}/preview",
            self.live,
            json={"substitutionData": {"name": "Ana"}},
        )
        self.call(
            "send with template",
            "POST",
            "/v1/layang/transmissions",
            self.live,
            json={**transmission(""), "bodyText": "", "templateId": tid},
        )
        self.call("list templates", "GET", templates, self.live)
        self.call("delete template", "DELETE", f"{templates}/{tid}", self.live)
        added = self.call(
            "add recipient", "POST", recipients, self.sandbox, json={"email": f"{tid}@rcpt.test"}
        )
        if added.status_code == 201:
            rid = added.json()["id"]
            self.call("resend", "POST", f"{recipients}/{rid}/resend", self.sandbox)
            self.call("get recipient", "GET", f"{recipients}/{rid}", self.sandbox)
            self.call("delete recipient", "DELETE", f"{recipients}/{rid}", self.sandbox)
        self.call("list recipients", "GET", recipients, self.sandbox)


def test_every_write_endpoint_at_once_never_503_nor_locked(config, app, tmp_path):
    live_key = accounts.create_api_key(accounts.create_account("acme", live=True))[1]
    sandbox_key = accounts.create_api_key(accounts.create_account("trial"))[1]
    server, base = serve(config, tmp_path, LAYANG_HTTP_WORKERS=3, LAYANG_HTTP_THREADS=4)
    # A sender works the same file meanwhile: its claims and records are writes too.
    worker = start(["worker"], process_env(config), tmp_path / "worker.log")
    mixes = [Mix(base, live_key, sandbox_key, n) for n in range(CLIENTS)]
    deadline = time.monotonic() + 8
    failures = []

    def run(mix):
        try:
            for n in itertools.count():
                if time.monotonic() > deadline:
                    return
                mix.round(n)
        except Exception as error:
            failures.append(error)
        finally:
            mix.http.close()

    threads = [threading.Thread(target=run, args=(mix,)) for mix in mixes]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        stop(worker)
        stop(server)
    assert not failures
    statuses = sum((mix.statuses for mix in mixes), collections.Counter())
    unexpected = {key: count for key, count in statuses.items() if key[1] >= 300}
    assert not unexpected, unexpected
    assert statuses[("send", 200)] >= CLIENTS
    assert statuses[("delete recipient", 204)] >= CLIENTS
    logs = (tmp_path / "api.log").read_text() + (tmp_path / "worker.log").read_text()
    assert "database is locked" not in logs
    assert "Traceback" not in logs


def test_every_answered_send_survives_sigkill_of_the_server(config, app, tmp_path):
    key = accounts.create_api_key(accounts.create_account("acme", live=True))[1]
    server, base = serve(config, tmp_path, LAYANG_HTTP_WORKERS=2, LAYANG_HTTP_THREADS=8)
    answered: list[tuple[str, int]] = []
    stop_sending = threading.Event()

    def send(client_number):
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http:
            for n in itertools.count():
                if stop_sending.is_set():
                    return
                try:
                    response = http.post(
                        "/v1/layang/transmissions", json=transmission(f"{client_number}-{n}")
                    )
                except httpx.HTTPError:
                    return  # the server died with this request in flight: never answered
                if response.status_code == 200:
                    answered.append((response.json()["transmissionId"], 2))

    threads = [threading.Thread(target=send, args=(n,)) for n in range(CLIENTS)]
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: len(answered) >= 300, 60, "too few sends were answered")
        # Master and workers die at once, with requests in flight.
        kill_server(server)
    finally:
        stop_sending.set()
        for thread in threads:
            thread.join()
        stop(server)
    stored = {t.id for t in Transmission.select(Transmission.id)}
    missing = [tid for tid, _ in answered if tid not in stored]
    assert not missing
    per_transmission = collections.Counter(r.transmission_id for r in Recipient.select())
    assert all(per_transmission[tid] == recipients for tid, recipients in answered)
    assert set(per_transmission) == stored  # nothing half-stored among the unanswered either
