"""What an SMTP client may hold: connections, idle time before AUTH, wrong passwords."""

from __future__ import annotations

import base64
import smtplib
import socket
import time
from dataclasses import replace

import pytest

from layang.submission.server import submission_server
from tests.delivery.test_crash import free_port
from tests.submission import test_submission as submission
from tests.submission.test_submission import SANDBOX_SENDER, connect

trial = submission.trial  # the submission tests' fixture, shared

TOTAL_CAP = 20
PER_ADDRESS_CAP = 5


@pytest.fixture
def smtp_config(config):
    return replace(
        config,
        smtp_bind=f"127.0.0.1:{free_port()}",
        smtp_max_connections=TOTAL_CAP,
        smtp_max_connections_per_address=PER_ADDRESS_CAP,
        smtp_auth_timeout_seconds=1.0,
        smtp_max_auth_failures=5,
    )


@pytest.fixture
def server(app, smtp_config):
    controller = submission_server(smtp_config)
    controller.start()
    yield controller
    controller.stop()


@pytest.fixture
def sockets():
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def idle_client(smtp_config, sockets, source="127.0.0.1"):
    """A TCP connection that reads the greeting and then says nothing."""
    sock = socket.create_connection(
        smtp_config.smtp_host_port, timeout=5, source_address=(source, 0)
    )
    sockets.append(sock)
    return sock, read_reply(sock)


def read_reply(sock):
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def closed_by_server(sock):
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True


def test_connections_beyond_the_cap_get_421_and_a_listed_client_still_gets_in(
    server, smtp_config, sockets, trial
):
    account, key = trial
    # Idle clients fill the cap from four addresses, each up to its own cap.
    for index in range(TOTAL_CAP):
        _, greeting = idle_client(smtp_config, sockets, f"127.0.0.{2 + index // PER_ADDRESS_CAP}")
        assert greeting.startswith(b"220 ")
    sock, reply = idle_client(smtp_config, sockets, "127.0.0.9")
    assert reply == b"421 4.7.0 Too many connections; try again later\r\n"
    assert closed_by_server(sock)
    assert server.limits.total == TOTAL_CAP
    # A slot freed is a slot for a real client, which sends its mail.
    sockets.pop(0).close()
    deadline = time.monotonic() + 5
    while server.limits.total >= TOTAL_CAP and time.monotonic() < deadline:
        time.sleep(0.01)
    smtp = connect(smtp_config)
    smtp.login(account.name, key)
    assert smtp.sendmail(SANDBOX_SENDER, ["ana@rcpt.test"], b"Subject: hi\r\n\r\nhi\r\n") == {}
    smtp.quit()


def test_one_address_cannot_take_every_connection(server, smtp_config, sockets):
    for _ in range(PER_ADDRESS_CAP):
        assert idle_client(smtp_config, sockets)[1].startswith(b"220 ")
    sock, reply = idle_client(smtp_config, sockets)
    assert reply.startswith(b"421 4.7.0")
    assert closed_by_server(sock)
    assert idle_client(smtp_config, sockets, "127.0.0.2")[1].startswith(b"220 ")


def test_idle_before_auth_is_closed_soon_and_after_auth_lasts(server, smtp_config, sockets, trial):
    account, key = trial
    sock, _ = idle_client(smtp_config, sockets)
    started = time.monotonic()
    assert closed_by_server(sock)
    assert time.monotonic() - started < 3  # the configured 1 s, not aiosmtpd's 300 s
    smtp = connect(smtp_config)
    smtp.login(account.name, key)
    time.sleep(1.5)
    assert smtp.noop()[0] == 250
    smtp.quit()
    assert server.limits.total == 0 or server.limits.total == 1  # the QUIT may be in flight


def plain(user, password):
    return base64.b64encode(f"\0{user}\0{password}".encode()).decode()


def test_third_wrong_password_closes_the_connection(server, smtp_config, trial):
    account, _ = trial
    smtp = connect(smtp_config)
    for _ in range(2):
        code, reply = smtp.docmd("AUTH", "PLAIN " + plain(account.name, "lyg_wrong"))
        assert (code, reply) == (535, b"5.7.8 Authentication credentials invalid")
    code, reply = smtp.docmd("AUTH", "PLAIN " + plain(account.name, "lyg_wrong"))
    assert code == 535
    code, reply = smtp.getreply()
    assert (code, reply) == (421, b"4.7.0 Too many failed authentications; closing")
    with pytest.raises(smtplib.SMTPServerDisconnected):
        smtp.noop()


def test_an_address_that_keeps_guessing_is_refused_auth(server, smtp_config, trial, caplog):
    account, key = trial
    for _ in range(smtp_config.smtp_max_auth_failures):  # one guess per connection
        smtp = connect(smtp_config)
        assert smtp.docmd("AUTH", "PLAIN " + plain(account.name, "lyg_guess"))[0] == 535
        smtp.close()
    smtp = connect(smtp_config)
    # Even the right key is not tried any more from this address, for the window.
    code, reply = smtp.docmd("AUTH", "PLAIN " + plain(account.name, key))
    assert (code, reply) == (421, b"4.7.0 Too many failed authentications; try again later")
    smtp.close()
    assert "lyg_guess" not in caplog.text and key not in caplog.text
