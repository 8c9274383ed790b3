"""What several benchmarks share: ports and CPU readings of this machine (``machine``), the
local SMTP sinks (``sinks``), the messages and filling and reading a Layang queue (``queue``), the
latency sink (``latency_sink``), a private Postfix (``postfix``), the HTTP endpoint counting what
Layang posts (``http_counter``), Layang's side of a comparison (``layang_run``), repeated
measurements (``repetitions``) and the storage benchmarks' databases, sender and clock
(``storage``)."""
