"""What Layang is: accepting messages (``intake``, for the API and SMTP alike), accounts and
their keys, sandbox recipients and consent, sending domains, activity records and engagement,
feedback reports, suppressions, webhook endpoints, idempotency and rate limits. The ways in
(``api``, ``web``, ``submission``, ``inbound``) call this layer; it calls ``mail``,
``webhooks`` and the infrastructure below it, never back up, and never ``delivery``. Who signs
in and what they did (``layang.team``) and how long data lives (``layang.lifecycle``) stand
above it."""
