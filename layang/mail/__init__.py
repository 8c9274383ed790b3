"""The vocabulary every layer speaks about a message: the typed ``OutgoingMessage`` and its
rules, composing its MIME bytes, DKIM signing, the return path (VERP), tracking links and
one-click unsubscribe, bounce classes, activity events, the suppression checks, and the
outbox's ``enqueue``. It knows nothing of how mail or webhooks are delivered."""
