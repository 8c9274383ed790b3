"""The people who work in an account and what they did: console users, their memberships and
roles, passwords, second factors and sessions (``people``, ``passkeys``), the console opened
with an API key (``key_sessions``), and the audit log (``audit``). The ways in call this room;
it stands on the domain (whose errors it raises), ``mail`` and the infrastructure, never on
``delivery``."""
