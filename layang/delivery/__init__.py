"""Delivering mail: the worker that claims queued recipients, builds each copy (personalise,
compose, return path, DKIM) and has the engine send it by the route ``LAYANG_RELAY_URL`` names
(a smarthost, the capture directory, direct to MX; the mailbox simulator's recipients always
take the simulator), then records every recipient's outcome.

The runtime, by part: ``worker`` (claims, builds, and its bookkeeper records), ``engine`` (the
event loop and a job's steps; the threads of a worker are described there), ``jobs`` (jobs and
their destinations' ready queues), ``pool`` (sessions), ``slots`` (the sites' shared slots and
state, as this process sees them), ``policies`` (transport policies), ``admission`` (the cap on
what is sent and not recorded), ``offloop`` (database calls off the loop). Transports, behind
one seam (``transports``): ``smarthost``, ``direct`` (MX), ``capture``, ``simulator``; the
SMTP client is ``smtp`` (with ``replies``), and ``outcomes`` what every transport reports.
See docs/architecture.md and docs/delivery.md."""
