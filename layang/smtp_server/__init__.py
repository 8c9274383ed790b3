"""What Layang's two SMTP servers (submission and inbound) share: a session admitted under a
cap on connections (in all and per client address), a size refusal that names its limit, and a
controller that serves the socket the configuration check bound."""
