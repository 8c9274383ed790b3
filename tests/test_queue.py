"""The delivery queue, visible and steerable: ``layang queue`` (lines, --json, suspend, resume),
``GET /v1/layang/queue`` (an account's own waiting mail), and the per-site figures of
``/metrics``; waiting mail is counted by recipient domain and grouped by the domain's site."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import replace
from datetime import datetime

import pytest
from click.testing import CliRunner

from layang.cli.commands import main
from layang.clock import now_ms
from layang.delivery.worker import Worker
from layang.destinations import mx, sites
from layang.destinations.mx import remember_sites
from layang.domain import accounts
from layang.metrics import site_outcome
from layang.models import Event, Recipient
from tests.conftest import BACKENDS
from tests.support.internet import SLOW_DOWN

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def send(client, auth, *addresses):
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@acme.test"},
            "subject": "Order shipped",
            "to": [{"email": address} for address in addresses],
            "bodyText": "hi",
        },
    )
    assert response.status_code == 200, response.get_json()


@pytest.fixture
def waiting(client, auth):
    """acme's mail waits for three domains, two of them hosted by Google, whose site said
    "slow down"; another account's mail waits for a fourth."""
    send(client, auth, "ana@a.example", "bo@a.example", "cy@A.Example")
    send(client, auth, "di@b.example", "ed@b.example", "fa@c.example")
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    send(client, other_auth, "gu@d.example")
    far = now_ms() + 3_600_000
    remember_sites([("a.example", "google.com", far), ("b.example", "google.com", far)])
    sites.slow_down("google.com", SLOW_DOWN, 5)
    assert sites.acquire_slot("google.com", "worker-1", 5, 60_000) is None  # paused
    sites.resume("google.com")
    sites.slow_down("google.com", SLOW_DOWN, 5)
    sites.suspend("d.example", None, "suspended by the operator")
    return other_auth


@pytest.fixture
def layang(config):
    runner = CliRunner()
    env = {"LAYANG_DATA_DIR": str(config.data_dir), "LAYANG_DATABASE_URL": config.database_url}

    def invoke(*args, status=0):
        result = runner.invoke(main, list(args), env=env, catch_exceptions=False)
        assert result.exit_code == status, result.output
        return result

    return invoke


def test_the_operator_sees_sites_and_steers_them(waiting, layang):
    listed = json.loads(layang("queue", "--json").stdout)["sites"]
    by_site = {row["site"]: row for row in listed}
    assert list(by_site) == ["google.com", "c.example", "d.example"]  # busiest first
    google = by_site["google.com"]
    assert google["domains"] == ["a.example", "b.example"]
    assert (google["queued"], google["inFlight"], google["sessions"]) == (5, 0, 0)
    assert (google["limit"], google["state"], google["lastReply"]) == (2, "throttled", SLOW_DOWN)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", google["until"])
    assert by_site["c.example"] == {
        "site": "c.example",
        "domains": ["c.example"],
        "queued": 1,
        "inFlight": 0,
        "sessions": 0,
        "limit": None,
        "state": "ok",
        "until": None,
        "lastReply": None,
    }
    assert by_site["d.example"]["state"] == "suspended" and by_site["d.example"]["until"] is None

    lines = layang("queue").stdout.splitlines()
    assert lines[0].startswith("google.com  queued 5  in flight 0  sessions 0/2  throttled until ")
    assert lines[0].endswith(f"last reply: {SLOW_DOWN}")
    assert lines[2].startswith("d.example  queued 1") and "suspended until resumed" in lines[2]

    # A recipient domain stands for its site.
    resumed = json.loads(layang("queue", "resume", "B.example").stdout)
    assert (resumed["site"], resumed["state"], resumed["limit"]) == ("google.com", "ok", 5)
    suspended = json.loads(layang("queue", "suspend", "c.example", "--for", "30m").stdout)
    assert suspended["state"] == "suspended"
    until = datetime.fromisoformat(suspended["until"].replace("Z", "+00:00")).timestamp()
    assert 1790 < until - time.time() <= 1800
    bad = layang("queue", "suspend", "c.example", "--for", "soon", status=2)
    assert "'soon' is not a duration such as 90s, 30m, 2h or 1d" in bad.output


def test_an_account_sees_only_its_own_waiting_mail(waiting, client, auth):
    body = client.get("/v1/layang/queue", headers=auth).get_json()
    items = body["items"]
    assert [(i["domain"], i["site"], i["queued"], i["state"]) for i in items] == [
        ("a.example", "google.com", 3, "throttled"),
        ("b.example", "google.com", 2, "throttled"),
        ("c.example", "c.example", 1, "ok"),
    ]
    # Layang's words and the reply's codes only: the site's state is every account's.
    assert items[0]["reason"] == "slow down: 421 4.7.28" and items[2]["reason"] is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", items[0]["oldestAt"])
    other = client.get("/v1/layang/queue", headers=waiting).get_json()["items"]
    assert [(i["domain"], i["state"], i["reason"]) for i in other] == [
        ("d.example", "suspended", "suspended by the operator")
    ]
    assert client.get("/v1/layang/queue").status_code == 401
    spec = client.get("/openapi.json").get_json()
    assert "List the account's waiting mail" in spec["paths"]["/v1/layang/queue"]["get"]["summary"]


def test_metrics_show_each_site(waiting, client):
    assert sites.acquire_slot("c.example", "worker-1", 10, 60_000)
    site_outcome("google.com", "deferred")
    text = client.get("/metrics").get_data(as_text=True)
    assert 'layang_site_queued{site="google.com"} 5.0' in text
    assert 'layang_site_queued{site="d.example"} 1.0' in text
    assert 'layang_site_sessions{site="c.example"} 1.0' in text
    assert 'layang_site_limit{site="google.com"} 2.0' in text
    assert 'layang_site_limit{site="c.example"} 10.0' in text
    assert re.search(r'layang_site_outcomes_total\{outcome="deferred",site="google.com"\} \d', text)


def test_a_site_is_named_by_its_mx_hosts_even_when_none_answers(
    client, auth, config, internet, layang
):
    # The MX records are known; the look-up of the host down1.example names fails (SERVFAIL,
    # a Delay: a host with no address at all would bounce at once), nothing listens on the
    # hosts down2.example names.
    internet.domain("down1.example", (10, "mx.down1.example"))
    internet.zone.servfail.add("mx.down1.example")
    internet.server("mx1.down2.example", refuse=True)
    internet.server("mx2.down2.example", refuse=True)
    internet.domain("down2.example", (10, "mx1.down2.example"), (20, "mx2.down2.example"))
    send(client, auth, "ana@down1.example", "bo@down2.example")
    mx_config = internet.configure(replace(config, retry_base_seconds=30))
    worker = Worker(mx_config)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()

    def tried() -> bool:
        delayed = Event.select().where(Event.status == "Delay").count() == 2
        return delayed and not Recipient.select().where(Recipient.lease_expires_at > now_ms())

    try:
        deadline = time.monotonic() + 30
        while not tried():
            assert time.monotonic() < deadline, "the worker did not try both domains"
            time.sleep(0.05)
        # What the worker learned is in the database by the time the attempt is recorded or
        # soon after (the worker's next chores), not only once a host answers.
        deadline = time.monotonic() + 10
        while len(mx.sites_of(["down1.example", "down2.example"])) < 2:
            assert time.monotonic() < deadline, "the MX look-ups were not remembered"
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(60)
    items = client.get("/v1/layang/queue", headers=auth).get_json()["items"]
    assert sorted((i["domain"], i["site"], i["queued"]) for i in items) == [
        ("down1.example", "mx.down1.example", 1),
        ("down2.example", "mx1.down2.example+mx2.down2.example", 1),
    ]
    listed = json.loads(layang("queue", "--json").stdout)["sites"]
    assert sorted((row["site"], row["domains"], row["queued"]) for row in listed) == [
        ("mx.down1.example", ["down1.example"], 1),
        ("mx1.down2.example+mx2.down2.example", ["down2.example"], 1),
    ]
