"""Logging: one line per event to stdout, with the ids that let an operator follow a message."""

from __future__ import annotations

import logging
import sys

from layang.config import Config

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def configure_logging(config: Config) -> None:
    root = logging.getLogger()
    if any(getattr(h, "_layang", False) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler._layang = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(config.log_level)
    # Request lines are the web server's job; these libraries are chatty at INFO.
    for noisy in ("werkzeug", "mail.log", "peewee"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
