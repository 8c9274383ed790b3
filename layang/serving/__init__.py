"""Running Layang: the processes (``layang run``, ``serve``, ``worker``, ``smtpd``,
``inbound``), the configuration check that comes before any of them starts, and the HTTP front
(the Flask app, gunicorn and the buffering server in front of it)."""
