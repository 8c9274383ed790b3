"""The layang command: accounts and keys."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from layang.cli import main


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

    from tests.sending.test_crash import free_port, process_env, start, stop, wait_until

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
        # Printed when ready: each answers at once.
        assert httpx.get(f"{base}/docs").status_code == 200
        assert httpx.get(f"{base}/console", follow_redirects=True).status_code == 200
    finally:
        stop(server)
