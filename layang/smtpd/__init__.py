"""SMTP submission: an aiosmtpd server that only enqueues, like every other way in."""
