"""A tracked link followed over HTTPS through Debian's ``caddy`` in front of Layang, as
docs/deploy.md configures it: on-demand certificates from Caddy's internal CA, asked for at
``/internal/tls-allowed``, so a verified tracking domain gets one and another name none."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import socket
import ssl
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import drain
from tests.postgres.server import unavailable

CADDYFILE = """{{
    admin off
    http_port {http_port}
    https_port {https_port}
    storage file_system {storage}
    local_certs
    skip_install_trust
    on_demand_tls {{
        ask {layang}/internal/tls-allowed
    }}
}}

https:// {{
    tls {{
        on_demand
    }}
    reverse_proxy {layang_host}
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def config(config, dns_zone):
    return replace(config, dns_resolver=dns_zone.address, public_url="https://track.layang.test")


@pytest.fixture
def caddy(live_server, tmp_path: Path):
    """Caddy on loopback ports in front of ``live_server``; yields (https port, root CA)."""
    binary = shutil.which("caddy")
    if binary is None:
        unavailable("caddy is not installed (apt-get install caddy)")
    http_port, https_port = free_port(), free_port()
    storage = tmp_path / "caddy"
    config_file = tmp_path / "Caddyfile"
    config_file.write_text(
        CADDYFILE.format(
            http_port=http_port,
            https_port=https_port,
            storage=storage,
            layang=live_server,
            layang_host=urlsplit(live_server).netloc,
        )
    )
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    log = (tmp_path / "caddy.log").open("wb")
    process = subprocess.Popen(
        [binary, "run", "--config", str(config_file), "--adapter", "caddyfile"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    root = storage / "pki" / "authorities" / "local" / "root.crt"
    deadline = time.monotonic() + 30
    while not root.exists() or not _listening(https_port):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError((tmp_path / "caddy.log").read_text())
        time.sleep(0.1)
    yield https_port, root
    process.terminate()
    process.wait(10)
    log.close()


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def https_get(port: int, root: Path, host: str, path: str) -> tuple[int, str | None, list[str]]:
    """GET ``path`` from ``host`` at the loopback port, verifying the certificate against the
    root CA for ``host`` (SNI), as a browser would; (status, Location, certificate's names)."""
    context = ssl.create_default_context(cafile=str(root))
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        tls = context.wrap_socket(raw, server_hostname=host)
    except ssl.SSLError:
        raw.close()
        raise
    connection = http.client.HTTPSConnection(host, port, context=context, timeout=30)
    connection.sock = tls
    try:
        names = [v for kind, v in tls.getpeercert()["subjectAltName"] if kind == "DNS"]
        connection.request("GET", path, headers={"Host": host})
        response = connection.getresponse()
        response.read()
        return response.status, response.getheader("Location"), names
    finally:
        connection.close()


def test_a_tracked_link_over_https_through_caddy(client, auth, dns_zone, upstream, relay_to, caddy):
    https_port, root = caddy
    created = client.post("/v1/layang/tracking-domains", headers=auth,
                          json={"domain": "links.shop.example"})  # fmt: skip
    dns_zone.publish(created.json["records"])
    verified = client.post("/v1/layang/tracking-domains/links.shop.example/verify", headers=auth)
    assert verified.json["status"] == "verified"
    sent = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": "shop@sender.test", "to": "ana@rcpt.test", "subject": "Sale",
            "bodyHtml": '<p>Hi</p><a href="https://shop.example/sale?x=1">Sale</a>',
            "optionsAttributes": {"clickTracking": True},
        },
    )  # fmt: skip
    tid = sent.json["transmissionId"]
    drain(relay_to(upstream))
    html = upstream.received[0].message.get_body(("html",)).get_content()
    link = re.search(r'href="(https://links\.shop\.example/t/c/[^"]+)"', html).group(1)

    status, location, names = https_get(https_port, root, "links.shop.example", urlsplit(link).path)
    assert (status, location) == (302, "https://shop.example/sale?x=1")
    assert names == ["links.shop.example"]
    record = client.get(f"/v1/layang/transmissions/{tid}", headers=auth).json["recipients"][0]
    assert [e["status"] for e in record["events"]][-1] == "Click"

    # A name that is no verified tracking domain gets no certificate.
    with pytest.raises(ssl.SSLError):
        https_get(https_port, root, "other.shop.example", "/t/c/x")
