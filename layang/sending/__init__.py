"""Sending: compose MIME, the outbox, the upstream relay and the worker."""
