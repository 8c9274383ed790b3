"""Delivering mail: the worker that claims queued recipients, builds each copy (personalise,
compose, return path, DKIM) and hands it to the route ``LAYANG_RELAY_URL`` names (a smarthost,
the capture directory, or the mailbox simulator), then records every recipient's outcome."""
