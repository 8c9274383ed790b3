"""The people who work in an account and what they did (CONTRACT section 21): console users,
their memberships and roles (``people``), passwords and signing in with one (``passwords``),
second factors (``two_factor``, ``passkeys``), the one-time links that set a password or bring
someone in (``links``, ``invitations``), sessions (``sessions`` for a person, ``key_sessions``
for the console opened with an API key), the mail the console sends them (``console_mail``),
and the audit log (``audit``). The ways in call this room; it stands on the domain (whose
errors it raises), ``mail`` and the infrastructure, never on ``delivery``."""
