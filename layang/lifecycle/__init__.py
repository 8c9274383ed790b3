"""How long what Layang stores lives: retention (history and content aged by each account's
settings), erasure (one person's data, on request), the weekly partitions the history is kept
in on PostgreSQL, and the housekeeping that clears what has expired (idempotency keys, rate
windows, sessions, links, old audit entries). It reaches into what the rooms below it store, the
domain's and the team's, so it stands above both; the worker runs it (``layang.serving``) and
``layang retention`` asks it."""
