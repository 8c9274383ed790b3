"""What many tests share: real servers (SMTP upstream, DNS, webhook receiver, MTA-STS policy
host), the simulated internet of loopback addresses and network namespaces, a test PKI, and the
browser. docs/development.md describes the layout."""
