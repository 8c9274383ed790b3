"""``layang send`` against the live service."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from layang.cli.commands import main
from layang.cli.send import default_base_url
from layang.config import Config
from tests.client.conftest import delivered_to
from tests.conftest import drain


@pytest.fixture
def layang(live_server, api_key):
    runner = CliRunner()

    def invoke(*args, env=None):
        environment = {"LAYANG_API_KEY": api_key, "LAYANG_BASE_URL": live_server, **(env or {})}
        return runner.invoke(main, ["send", *args], env=environment, catch_exceptions=False)

    return invoke


def test_send_prints_the_transmission_id(layang, sdk, upstream, relay_to, tmp_path):
    page = tmp_path / "body.html"
    page.write_text("<!DOCTYPE html><html><body><p>Grüße</p></body></html>", encoding="utf-8")
    invoice = tmp_path / "invoice.pdf"
    invoice.write_bytes(b"%PDF-1.4 tiny")
    result = layang(
        "--from", "Shop <shop@shop.example>",
        "--to", "ana@rcpt.example", "--to", "Bo <bo@rcpt.example>",
        "--cc", "cy@rcpt.example", "--bcc", "dee@rcpt.example",
        "--subject", "Invoice", "--text", "Attached.", "--html-file", str(page),
        "--attach", str(invoice),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    transmission_id = json.loads(result.stdout)["transmissionId"]
    assert sdk.transmissions.get(transmission_id)["subject"] == "Invoice"

    drain(relay_to(upstream))
    message = delivered_to(upstream, "dee@rcpt.example")
    assert message["To"] == "ana@rcpt.example, Bo <bo@rcpt.example>"
    assert message["Cc"] == "cy@rcpt.example"
    assert "Grüße" in message.get_body(("html",)).get_content()
    [attachment] = message.iter_attachments()
    assert attachment.get_filename() == "invoice.pdf"
    assert attachment.get_payload(decode=True) == b"%PDF-1.4 tiny"


def test_send_a_template(layang, sdk, upstream, relay_to):
    sdk.templates.create(
        id="hello", name="Hello", subject="Hi {{name}}", body_text="Hello {{name}}!"
    )
    result = layang(
        "--from", "shop@shop.example", "--to", "ana@rcpt.example",
        "--template", "hello", "--data", '{"name": "Ana"}',
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    drain(relay_to(upstream))
    message = delivered_to(upstream, "ana@rcpt.example")
    assert message["Subject"] == "Hi Ana"
    assert message.get_content().strip() == "Hello Ana!"


def test_errors(layang):
    refused = layang("--from", "shop@shop.example", "--to", "nope", "--subject", "x", "--text", "x")
    assert refused.exit_code == 1 and refused.stdout == ""
    body = json.loads(refused.stderr)
    assert body["error"] == "validation_failed" and body["status"] == 400
    assert body["message"].startswith("to.0.email:") and body["errors"]["to"]["0"]["email"]

    unknown = layang(
        "--from", "a@x.example", "--to", "b@x.example", "--text", "x", "--subject", "x",
        env={"LAYANG_API_KEY": "lyg_wrong"},
    )  # fmt: skip
    assert unknown.exit_code == 1 and json.loads(unknown.stderr)["error"] == "unauthorized"

    other_name = layang(
        "--from", "a@x.example", "--to", "b@x.example", "--text", "x", "--subject", "x",
        env={"LAYANG_API_KEY": None, "LAYANG_KEY": "lyg_wrong"},
    )  # fmt: skip
    assert other_name.exit_code == 1 and json.loads(other_name.stderr)["error"] == "unauthorized"
    no_key = layang("--from", "a@x.example", "--to", "b@x.example", env={"LAYANG_API_KEY": ""})
    assert no_key.exit_code == 2 and "LAYANG_API_KEY" in no_key.stderr
    bad_data = layang(
        "--from", "a@x.example", "--to", "b@x.example", "--template", "t", "--data", "[1]"
    )
    assert bad_data.exit_code == 2 and "JSON object" in bad_data.stderr


def test_default_base_url():
    def base_url(bind: str) -> str:
        return default_base_url(Config(secret_key="k", http_bind=bind))

    assert default_base_url(Config(secret_key="k")) == "http://127.0.0.1:8000"
    assert base_url("0.0.0.0:9000") == "http://127.0.0.1:9000"
    assert base_url("[::1]:9001") == "http://[::1]:9001"


def test_without_base_url_send_goes_to_the_http_bind_of_the_env_file(
    live_server, api_key, sdk, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(f"LAYANG_HTTP_BIND={live_server.removeprefix('http://')}\n")
    result = CliRunner().invoke(
        main,
        ["send", "--from", "a@x.example", "--to", "b@x.example", "--subject", "s", "--text", "t"],
        env={"LAYANG_API_KEY": api_key, "LAYANG_BASE_URL": None, "LAYANG_HTTP_BIND": None},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    transmission_id = json.loads(result.stdout)["transmissionId"]
    assert sdk.transmissions.get(transmission_id)["subject"] == "s"


def test_a_bad_http_bind_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        main,
        ["send", "--key", "lyg_x", "--from", "a@x.example", "--to", "b@x.example", "--text", "t"],
        env={"LAYANG_BASE_URL": None, "LAYANG_HTTP_BIND": "nowhere"},
    )
    assert result.exit_code == 2 and "LAYANG_HTTP_BIND must look like host:port" in result.stderr
