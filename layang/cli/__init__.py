"""The ``layang`` command: one sub-command per process (run, serve, worker, smtpd, inbound)
and the operator's tools (db, accounts, keys, domains, send)."""

from layang.cli.commands import main

__all__ = ["main"]
