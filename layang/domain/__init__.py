"""What Layang is: accepting messages, accounts and their keys, sandbox recipients, activity
records and engagement. The ways in (``api``, ``smtpd``, ``web``) call this layer; it calls
``sending`` and the infrastructure below it, never back up."""
