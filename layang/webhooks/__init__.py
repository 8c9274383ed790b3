"""Delivering webhooks: the outbox of events waiting for endpoints, the dispatcher that POSTs
them, and the wire format (Standard Webhooks signatures, where a request may go)."""
