"""The capture directory: one file per recipient, nothing sent."""

from __future__ import annotations

from layang.delivery.capture import CaptureDirectory
from layang.delivery.envelope import Envelope
from layang.delivery.smarthost import relay_from_url
from tests.delivery.conftest import MESSAGE


def test_capture_writes_one_file_per_recipient(tmp_path):
    directory = tmp_path / "new" / "outbox"
    capture = relay_from_url(f"capture:{directory}")
    assert isinstance(capture, CaptureDirectory)
    recipients = ("ana@rcpt.test", "b/../x@rcpt.test")
    results = capture.deliver(Envelope("shop@sender.test", recipients, MESSAGE, reference="T1"))
    assert [(r.code, r.outcome) for r in results] == [(250, "delivered")] * 2
    files = sorted(directory.iterdir())
    assert len(files) == 2
    assert all(f.suffix == ".eml" and f.name.startswith("T1-") for f in files)
    assert all(r.reply.startswith("250 2.0.0 captured as T1-") for r in results)
    by_name = {r.reply.rsplit(" ", 1)[1]: r.recipient for r in results}
    assert set(by_name) == {f.name for f in files}
    for path in files:
        recipient = by_name[path.name]
        assert path.read_bytes() == (
            f"Return-Path: <shop@sender.test>\r\nDelivered-To: {recipient}\r\n".encode() + MESSAGE
        )


def test_capture_without_reference_and_failure_defers(tmp_path):
    envelope = Envelope("a@sender.test", ("b@rcpt.test",), MESSAGE, crlf_clean=True)
    (result,) = CaptureDirectory(tmp_path / "out").deliver(envelope)
    (path,) = (tmp_path / "out").glob("msg-b@rcpt.test-*.eml")
    assert len(path.name) == len("msg-b@rcpt.test-12345678.eml")
    assert result.code == 250

    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    (result,) = CaptureDirectory(blocked).deliver(envelope)
    assert (result.code, result.outcome) == (0, "deferred")
    assert str(blocked) in result.reply
    assert not list(tmp_path.glob(".*.tmp"))
