"""What several benchmarks share: ports and CPU readings of this machine (``machine``), the
local SMTP sinks (``sinks``), and filling and reading a Layang queue (``queue``)."""
