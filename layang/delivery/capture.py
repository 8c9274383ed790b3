"""The capture directory (``LAYANG_RELAY_URL=capture:DIR``): a development sink that writes each
recipient's copy to a file instead of sending it; nothing leaves the machine."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from layang.delivery.envelope import Envelope
from layang.delivery.outcomes import DEFERRED, DELIVERED, RecipientResult

_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9.@+=_-]")


class CaptureDirectory:
    """Writes ``DIR/<reference>-<recipient>-<random>.eml`` per recipient. Blocking (file
    writes): the engine runs it in a thread (see :mod:`layang.delivery.transports`)."""

    def __init__(self, directory: Path) -> None:
        """``directory`` is created on first use if missing."""
        self.directory = directory

    def __repr__(self) -> str:
        return f"<CaptureDirectory {self.directory}>"

    def deliver(self, envelope: Envelope) -> list[RecipientResult]:
        """One file per recipient of ``envelope``, written atomically: ``Return-Path`` and
        ``Delivered-To`` headers followed by the bytes unchanged (nothing goes over SMTP, so
        line ends are left as given). A filesystem error defers that recipient (code 0);
        nothing is raised."""
        results = []
        for recipient in envelope.recipients:
            try:
                name = self._write(envelope, recipient)
            except OSError as error:
                reply = f"cannot write to {self.directory}: {error}"
                results.append(RecipientResult(recipient, 0, reply, DEFERRED))
            else:
                reply = f"250 2.0.0 captured as {name}"
                results.append(RecipientResult(recipient, 250, reply, DELIVERED))
        return results

    def _write(self, envelope: Envelope, recipient: str) -> str:
        self.directory.mkdir(parents=True, exist_ok=True)
        name = (
            f"{_safe_filename(envelope.reference or 'msg')}-{_safe_filename(recipient)}"
            f"-{secrets.token_hex(4)}.eml"
        )
        # A dot-name ending in .tmp: readers globbing *.eml never see a half-written file.
        temporary = self.directory / f".{name}.tmp"
        head = f"Return-Path: <{envelope.mail_from}>\r\nDelivered-To: {recipient}\r\n".encode()
        try:
            with open(temporary, "xb") as file:
                file.write(head)
                file.write(envelope.data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.directory / name)
        except OSError:
            temporary.unlink(missing_ok=True)
            raise
        return name


def _safe_filename(value: str) -> str:
    return _UNSAFE_FILENAME.sub("_", value).lstrip(".")[:80] or "_"
