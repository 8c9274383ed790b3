"""Run ``layang`` noting every setting the code reads from its configuration.

``python -m tests.support.settings_recorder ARGS…`` runs ``layang ARGS…``; each ``Config`` field (or
property derived from one) read outside ``layang/config.py`` is appended, once per process, to
the file named by ``RECORD_SETTINGS_TO`` (forked gunicorn workers append theirs too).
"""

from __future__ import annotations

import os
import sys
from dataclasses import fields

from layang import config as config_module
from layang.config import Config

DERIVED = {"http_host_port": "http_bind", "smtp_host_port": "smtp_bind"}
DERIVED["dns_resolvers"] = "dns_resolver"
NAMES = {setting.name for setting in fields(Config)}
CONFIG_FILE = config_module.__file__
PATH = os.environ["RECORD_SETTINGS_TO"]
seen: set[tuple[int, str]] = set()


def _get(self: Config, name: str) -> object:
    setting = DERIVED.get(name, name)
    # Reads inside config.py (settling defaults, comparing) are not the command's.
    if (
        setting in NAMES
        and (os.getpid(), setting) not in seen
        and sys._getframe(1).f_code.co_filename != CONFIG_FILE
    ):
        seen.add((os.getpid(), setting))
        with open(PATH, "a") as record:
            record.write(setting + "\n")
    return object.__getattribute__(self, name)


Config.__getattribute__ = _get  # type: ignore[method-assign]

if __name__ == "__main__":
    from layang.cli.commands import main

    main(sys.argv[1:], prog_name="layang")
