"""Logging: one line per event to stdout, with the ids that let an operator follow a message.

``LAYANG_LOG_FORMAT=json`` writes each line as a JSON object instead, for log shippers; the
``key=value`` pairs of a message (``tid=…``, ``rid=…``) become fields of their own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
import time

from layang.config import Config

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
_PAIR = re.compile(r"(?:^|\s)([a-z][a-z_]*)=(\"(?:[^\"\\]|\\.)*\"|\S+)")
# Fields the JSON line always has; a message pair of the same name does not overwrite them.
_RESERVED = frozenset({"time", "level", "logger", "message", "exception"})


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the message's pairs, and the
    traceback when there is one."""

    converter = time.gmtime

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        entry: dict[str, object] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        for key, value in _PAIR.findall(message):
            if key not in _RESERVED and key not in entry:
                entry[key] = _pair_value(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def _pair_value(raw: str) -> str:
    if raw.startswith('"'):
        try:
            return str(json.loads(raw))
        except ValueError:
            return raw
    return raw


def shown_recipient(address: str, how: str) -> str:
    """``address`` as ``LAYANG_LOG_RECIPIENTS`` says logs show it: as it is (``address``), or
    (``hash``) ``sha256:`` and the first 16 hex digits of the SHA-256 of the address in lower
    case, which an operator can compute to find a recipient's lines
    (``printf %s ana@example.org | sha256sum``) without the logs holding addresses."""
    if how != "hash":
        return address
    return "sha256:" + hashlib.sha256(address.lower().encode("utf-8")).hexdigest()[:16]


def configure_logging(config: Config) -> None:
    """Send the service's logs to stdout once per process, in the configured format."""
    root = logging.getLogger()
    if any(getattr(h, "_layang", False) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stdout)
    formatter = JsonFormatter() if config.log_format == "json" else logging.Formatter(FORMAT)
    handler.setFormatter(formatter)
    handler._layang = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(config.log_level)
    # Request lines are the web server's job; these libraries are chatty at INFO.
    for noisy in ("werkzeug", "mail.log", "peewee"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
