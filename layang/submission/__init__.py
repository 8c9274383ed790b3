"""The SMTP submission server (``layang smtpd``): STARTTLS, AUTH with an API key, and the same
intake as the HTTP API."""
