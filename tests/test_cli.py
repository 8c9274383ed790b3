"""The layang command: accounts and keys."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import httpx
import pytest
from click.testing import CliRunner

from layang.cli.commands import main
from layang.config import describe_settings

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def layang(config):
    runner = CliRunner()
    env = {"LAYANG_DATA_DIR": str(config.data_dir), "LAYANG_DATABASE_URL": config.database_url}

    def invoke(*args, ok=True, env=env):
        result = runner.invoke(main, list(args), env=env, catch_exceptions=False)
        if ok:
            assert result.exit_code == 0, result.output
        return result

    return invoke


def test_accounts_and_keys_lifecycle(layang, client):
    created = json.loads(layang("accounts", "create", "shop").stdout)
    assert created["name"] == "shop" and created["mode"] == "sandbox"
    assert isinstance(created["id"], int)
    live = json.loads(layang("accounts", "create", "bigshop", "--live").stdout)
    assert live["mode"] == "live"

    key = json.loads(layang("keys", "create", "shop", "--label", "ci").stdout)
    assert key["account"] == "shop" and key["key"].startswith("lyg_")
    listed = json.loads(layang("keys", "list", "shop").stdout)
    assert [k["id"] for k in listed] == [key["id"]]
    assert key["key"] not in layang("keys", "list", "shop").stdout
    assert listed[0]["revokedAt"] is None

    headers = {"Authorization": f"Bearer {key['key']}"}
    assert client.get("/v1/layang/activity", headers=headers).status_code == 200
    layang("keys", "revoke", key["id"])
    assert client.get("/v1/layang/activity", headers=headers).status_code == 401
    assert json.loads(layang("keys", "list", "shop").stdout)[0]["revokedAt"]


def test_cli_errors(layang):
    layang("accounts", "create", "shop")
    duplicate = layang("accounts", "create", "shop", ok=False)
    assert duplicate.exit_code == 1
    assert json.loads(duplicate.stderr)["error"] == "conflict"
    missing = layang("keys", "create", "nobody", ok=False)
    assert json.loads(missing.stderr)["error"] == "not_found"
    assert layang("keys", "revoke", "key_nope", ok=False).exit_code == 1
    assert layang("accounts", "create", "bad name!", ok=False).exit_code == 1


def test_db_upgrade_is_idempotent(layang):
    first = json.loads(layang("db", "upgrade").stdout)
    again = json.loads(layang("db", "upgrade").stdout)
    assert again == {"applied": []}
    assert isinstance(first["applied"], list)


def test_domains_add_list_and_verify(layang, config, dns_zone):
    layang("accounts", "create", "shop", "--live")
    added = json.loads(layang("domains", "add", "shop", "example.com").stdout)
    assert added["status"] == "pending" and added["dkim"][0]["bits"] == 2048
    assert "PRIVATE" not in json.dumps(added)
    listed = json.loads(layang("domains", "list", "shop").stdout)
    assert [d["domain"] for d in listed] == ["example.com"]
    dns_zone.publish(added["records"])
    env = {"LAYANG_DATA_DIR": str(config.data_dir), "LAYANG_DATABASE_URL": config.database_url}
    verify = layang("domains", "verify", "shop", "example.com", env=env | resolver(dns_zone))
    assert json.loads(verify.stdout)["status"] == "verified"
    again = layang("domains", "add", "shop", "example.com", ok=False)
    assert json.loads(again.stderr)["error"] == "conflict"


def resolver(zone):
    return {"LAYANG_DNS_RESOLVER": zone.address}


def test_keys_have_scopes(layang, client):
    layang("accounts", "create", "shop", "--live")
    full = json.loads(layang("keys", "create", "shop").stdout)
    read = json.loads(layang("keys", "create", "shop", "--scope", "read").stdout)
    send = json.loads(layang("keys", "create", "shop", "--scope", "send").stdout)
    assert (full["scope"], read["scope"], send["scope"]) == ("full", "read", "send")
    listed = {k["id"]: k["scope"] for k in json.loads(layang("keys", "list", "shop").stdout)}
    assert listed == {full["id"]: "full", read["id"]: "read", send["id"]: "send"}
    refused = client.post(
        "/v1/layang/templates",
        json={"id": "t", "name": "T", "subject": "S", "bodyText": "x"},
        headers={"Authorization": f"Bearer {read['key']}"},
    )
    assert refused.status_code == 403
    assert layang("keys", "create", "shop", "--scope", "admin", ok=False).exit_code == 2


def test_run_prints_the_api_docs_and_console_urls_when_ready(config, tmp_path):
    import httpx

    from tests.delivery.test_crash import free_port, process_env, start, stop, wait_until

    port = free_port()
    env = process_env(
        config,
        LAYANG_HTTP_BIND=f"127.0.0.1:{port}",
        LAYANG_SMTP_BIND=f"127.0.0.1:{free_port()}",
        LAYANG_RELAY_URL=f"capture:{tmp_path / 'outbox'}",
    )
    log_path = tmp_path / "run.log"
    server = start(["run"], env, log_path)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: "Console: " in log_path.read_text(), 30, "layang run never got ready")
        lines = log_path.read_text().splitlines()
        assert f"API: {base}/v1" in lines
        assert f"Docs: {base}/docs" in lines
        assert f"Console: {base}/console" in lines
        # One name for the key, the one the SDK and `layang send` read.
        assert any(line.startswith("  export LAYANG_API_KEY=lyg_") for line in lines)
        # The defaults that only work on this machine are called what they are.
        (notice,) = [line for line in lines if line.startswith("Development values:")]
        assert "MX 10 127.0.0.1" in notice and "LAYANG_PUBLIC_URL" in notice
        # Printed when ready: each answers at once.
        assert httpx.get(f"{base}/docs").status_code == 200
        assert httpx.get(f"{base}/console", follow_redirects=True).status_code == 200
    finally:
        stop(server)


# -- what a newcomer meets: --help, a database that is not there -----------------------------


def all_commands(group=main, prefix=()):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from all_commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


COMMANDS = dict(all_commands())


def help_of(path):
    result = CliRunner().invoke(main, [*path, "--help"], catch_exceptions=False)
    assert result.exit_code == 0
    return result.stdout


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_every_commands_help_lists_the_variables_it_reads_with_defaults(path):
    text = help_of(path)
    assert "Environment (and .env), with defaults:" in text
    rows = describe_settings(COMMANDS[path].layang_uses.settings)
    assert rows
    for variable, default in rows:
        assert re.search(rf"^\s+{variable}\s+{re.escape(default)}$", text, re.M), variable


def test_the_help_tells_defaults_derived_from_other_settings():
    text = help_of(("run",))
    assert re.search(r"LAYANG_DATABASE_URL\s+sqlite:///\$LAYANG_DATA_DIR/layang.db", text)
    assert re.search(r"LAYANG_RELAY_URL\s+capture:\$LAYANG_DATA_DIR/outbox", text)
    assert re.search(r"LAYANG_LEASE_SECONDS\s+60$", text, re.M)
    assert "LAYANG_HTTP_WORKERS" not in text  # gunicorn's, for layang serve
    assert "LAYANG_HTTP_WORKERS" in help_of(("serve",))


def test_keys_list_from_another_directory_names_the_database_and_creates_nothing(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    result = subprocess.run(
        [sys.executable, "-m", "layang", "keys", "list", "default"],
        cwd=elsewhere,
        env=env | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"LAYANG_DATABASE_URL: no Layang database at sqlite:///{elsewhere}/var/layang.db, so it "
        "holds no accounts; create one with `layang accounts create NAME` or `layang run`, or "
        "set LAYANG_DATA_DIR (or LAYANG_DATABASE_URL) to the one you meant\n"
    )
    assert list(elsewhere.iterdir()) == []


def test_a_missing_account_is_named_with_the_database_and_what_it_holds(layang, config):
    where = f"sqlite:///{config.data_dir / 'layang.db'}"
    empty = layang("keys", "list", "default", ok=False)
    layang("db", "upgrade")
    empty = layang("keys", "list", "default", ok=False)
    assert empty.exit_code == 1
    assert json.loads(empty.stderr)["message"] == (
        f"No account named 'default' in {where} (it holds no accounts)."
    )
    layang("accounts", "create", "shop")
    layang("accounts", "create", "bigshop", "--live")
    missing = json.loads(layang("keys", "create", "default", ok=False).stderr)
    assert missing["message"] == (
        f"No account named 'default' in {where} (its accounts: bigshop, shop)."
    )
    revoke = json.loads(layang("keys", "revoke", "key_nope", ok=False).stderr)
    assert revoke["message"] == f"No API key with id 'key_nope' in {where}."


def test_read_only_commands_leave_an_empty_database_untouched(layang, config):
    """A database without Layang's schema (an empty PostgreSQL, an unrelated file) is not
    migrated by a command that only reads."""
    import sqlite3

    path = config.data_dir / "layang.db"
    sqlite3.connect(path).close()
    before = path.read_bytes()
    result = layang("domains", "list", "shop", ok=False)
    assert result.exit_code == 2
    assert "no Layang database" in result.stderr and "holds no accounts" in result.stderr
    assert path.read_bytes() == before
    assert not (config.data_dir / "secret_key").exists()


# -- every setting a command reads is in its help ----------------------------------------------


def record(args, tmp_path, env, **popen):
    """Start ``layang ARGS`` noting the settings it reads (tests/support/settings_recorder.py)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.settings_recorder", *args],
        cwd=ROOT,
        env=env,
        **popen,
    )


def recorded(path):
    return set(path.read_text().split()) if path.exists() else set()


def in_help(path):
    return set(COMMANDS[path].layang_uses.settings)


def submit_over_smtp(bind, user, key):
    import smtplib
    import ssl

    host, port = bind.rsplit(":", 1)
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with smtplib.SMTP(host, int(port), local_hostname="client.test", timeout=10) as smtp:
        smtp.starttls(context=context)
        smtp.login(user, key)
        smtp.sendmail("shop@sender.test", ["b@rcpt.test"], b"Subject: s\r\n\r\nHi\r\n")


def send_over_http(base, key):
    response = httpx.post(
        f"{base}/v1/layang/transmissions",
        headers={"Authorization": f"Bearer {key}"},
        json={
            "from": {"email": "a@sender.test"},
            "subject": "s",
            "to": [{"email": "b@rcpt.test"}],
            "bodyText": "t",
            "optionsAttributes": {"openTracking": True, "clickTracking": True},
            "bodyHtml": '<a href="https://example.com/">x</a>',
        },
        timeout=10,
    )
    assert response.status_code == 200, response.text
    auth = {"Authorization": f"Bearer {key}"}
    httpx.get(f"{base}/v1/layang/activity", headers=auth)
    httpx.post(f"{base}/v1/layang/domains", json={"domain": "example.com"}, headers=auth)
    httpx.get(f"{base}/v1/layang/domains", headers=auth, timeout=30)
    for page in ("/healthz", "/metrics", "/docs", "/console/", "/openapi.json"):
        httpx.get(f"{base}{page}", follow_redirects=True, timeout=10)


def test_the_services_read_only_settings_their_help_lists(tmp_path, upstream):
    from tests.delivery.test_crash import free_port, stop, wait_until

    http, smtp, metrics = (f"127.0.0.1:{free_port()}" for _ in range(3))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env.update(
        PYTHONUNBUFFERED="1",
        LAYANG_DATA_DIR=str(tmp_path / "data"),
        LAYANG_RELAY_URL=upstream.url,
        LAYANG_HTTP_BIND=http,
        LAYANG_SMTP_BIND=smtp,
        LAYANG_WORKER_METRICS_BIND=metrics,
        LAYANG_WORKER_POLL_SECONDS="0.05",
        LAYANG_HTTP_WORKERS="1",
    )
    base = f"http://{http}"

    def service(args, until):
        reads = tmp_path / f"{'-'.join(args)}.reads"
        log = tmp_path / f"{'-'.join(args)}.log"
        with open(log, "wb") as out:
            process = record(
                args, tmp_path, env | {"RECORD_SETTINGS_TO": str(reads)}, stdout=out, stderr=out
            )
        try:
            until(log)
        finally:
            stop(process)
        assert process.returncode == 0, log.read_text()
        return recorded(reads)

    def run_until_delivered(log):
        wait_until(lambda: "Console:" in log.read_text(), 30, log.read_text())
        key = re.search(r"export LAYANG_API_KEY=(\S+)", log.read_text()).group(1)
        send_over_http(base, key)
        submit_over_smtp(smtp, "default", key)
        upstream.wait_for(2, timeout=30)
        httpx.get(f"http://{metrics}/metrics", timeout=5)

    reads = service(["run"], run_until_delivered)
    assert reads >= {"relay_url", "smtp_bind", "http_bind", "lease_seconds"}  # it does record
    assert reads <= in_help(("run",)), reads - in_help(("run",))

    key = json.loads(
        subprocess.run(
            [sys.executable, "-m", "layang", "keys", "create", "default"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            check=True,
        ).stdout
    )["key"]

    def serve_a_send(log):
        wait_until(lambda: _answers(f"{base}/healthz"), 30, log.read_text())
        send_over_http(base, key)

    reads = service(["serve"], serve_a_send)
    assert reads <= in_help(("serve",)), reads - in_help(("serve",))

    def deliver(log):
        upstream.wait_for(3, timeout=30)
        wait_until(lambda: _answers(f"http://{metrics}/metrics"), 10, log.read_text())

    reads = service(["worker"], deliver)
    assert "relay_url" in reads
    assert reads <= in_help(("worker",)), reads - in_help(("worker",))

    def submit(log):
        wait_until(lambda: "smtp submission listening" in log.read_text(), 30, log.read_text())
        submit_over_smtp(smtp, "default", key)

    reads = service(["smtpd"], submit)
    assert reads <= in_help(("smtpd",)), reads - in_help(("smtpd",))


def _answers(url):
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_other_commands_read_only_settings_their_help_lists(tmp_path, dns_zone):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env.update(LAYANG_DATA_DIR=str(tmp_path / "data"), LAYANG_DNS_RESOLVER=dns_zone.address)
    key_id = None
    steps = [
        ("db", "upgrade"),
        ("accounts", "create", "shop", "--live"),
        ("keys", "create", "shop"),
        ("keys", "list", "shop"),
        ("keys", "revoke", None),
        ("domains", "add", "shop", "example.com"),
        ("domains", "list", "shop"),
        ("domains", "verify", "shop", "example.com"),
    ]
    for step in steps:
        args = [key_id if arg is None else arg for arg in step]
        reads = tmp_path / f"{'-'.join(args)}.reads"
        process = record(
            args, tmp_path, env | {"RECORD_SETTINGS_TO": str(reads)}, stdout=subprocess.PIPE
        )
        out, _ = process.communicate(timeout=60)
        assert process.returncode == 0, args
        if step[:2] == ("keys", "create"):
            key_id = json.loads(out)["id"]
        path = tuple(a for a in step[:2])
        assert recorded(reads) <= in_help(path), (args, recorded(reads) - in_help(path))


def test_the_readmes_ports_taken_line_moves_every_port_run_opens():
    from layang.cli.services import run
    from layang.config import Config

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("Ports taken?", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    moved = set(re.findall(r"(LAYANG_[A-Z_]+_BIND)=\S+", block))
    defaults = Config(secret_key="k")
    opened = {
        listener.variable
        for listener in run.layang_uses.needs.listeners
        if getattr(defaults, listener.setting)  # an empty bind is a listener that is off
    }
    assert opened == {"LAYANG_HTTP_BIND", "LAYANG_SMTP_BIND", "LAYANG_INBOUND_BIND"}
    assert moved == opened


def test_queue_suspend_refuses_a_site_never_seen_unless_forced(layang, client, auth):
    from layang.clock import now_ms
    from layang.destinations.mx import remember_sites
    from layang.models import SiteState

    layang("db", "upgrade")
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@acme.test"},
            "subject": "Hello",
            "to": [{"email": "ana@gmail.example"}, {"email": "bo@waiting.example"}],
            "bodyText": "hi",
        },
    )
    assert response.status_code == 200
    remember_sites([("gmail.example", "google.com", now_ms() + 3_600_000)])

    typo = layang("queue", "suspend", "gmial.example", ok=False)
    assert typo.exit_code == 1
    assert typo.stderr.startswith("No site or recipient domain named 'gmial.example' has been seen")
    assert "--force" in typo.stderr and typo.stdout == ""
    assert SiteState.get_or_none(SiteState.site == "gmial.example") is None

    # A recipient domain, the site it resolved to, a domain not resolved yet: all known.
    for name, site in [
        ("gmail.example", "google.com"),
        ("google.com", "google.com"),
        ("waiting.example", "waiting.example"),
    ]:
        suspended = json.loads(layang("queue", "suspend", name).stdout)
        assert (suspended["site"], suspended["state"]) == (site, "suspended")
    forced = json.loads(layang("queue", "suspend", "new-site.example", "--force").stdout)
    assert (forced["site"], forced["state"]) == ("new-site.example", "suspended")
