"""A local SMTP sink for the benchmarks: accepts everything, keeps nothing.

python bench/smtp_sink.py PORT [--pipelining] [--latency-ms MS]

``--pipelining`` advertises PIPELINING in EHLO; aiosmtpd handles pipelined commands either way.
``--latency-ms`` holds every reply that long before it is written, in order, without holding
up the commands behind it: a stand-in for a link's round-trip time, which loopback lacks.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import threading

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP


class Sink:
    def __init__(self, pipelining: bool = False) -> None:
        self.pipelining = pipelining

    async def handle_EHLO(self, server, session, envelope, hostname, responses) -> list[str]:
        session.host_name = hostname
        if self.pipelining:
            return [*responses[:-1], "250-PIPELINING", responses[-1]]
        return responses

    async def handle_DATA(self, server, session, envelope) -> str:
        return "250 2.0.0 OK"


class DelayedSMTP(SMTP):
    """Replies leave ``latency`` seconds after they are made, in the order they were made."""

    def __init__(self, handler, *, latency: float, **kwargs) -> None:
        super().__init__(handler, **kwargs)
        self.latency = latency
        self.outbox: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        self.sender = self.loop.create_task(self._send_due())

    async def push(self, status) -> None:
        response = status.encode("utf-8") if isinstance(status, str) else status
        self.outbox.put_nowait((self.loop.time() + self.latency, response + b"\r\n"))

    async def _send_due(self) -> None:
        while True:
            due, response = await self.outbox.get()
            await asyncio.sleep(max(0.0, due - self.loop.time()))
            if self.transport is not None:
                self.transport.write(response)

    def connection_lost(self, error) -> None:
        self.sender.cancel()
        super().connection_lost(error)


class DelayedController(Controller):
    def __init__(self, handler, latency: float, **kwargs) -> None:
        super().__init__(handler, **kwargs)
        self.latency = latency

    def factory(self) -> SMTP:
        return DelayedSMTP(self.handler, latency=self.latency, **self.SMTP_kwargs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--pipelining", action="store_true")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()
    extra = {}
    kind = Controller
    if args.latency_ms > 0:
        kind, extra = DelayedController, {"latency": args.latency_ms / 1000}
    controller = kind(
        Sink(args.pipelining),
        hostname="127.0.0.1",
        port=args.port,
        server_hostname="sink.bench",
        data_size_limit=0,
        **extra,
    )
    controller.start()
    print("ready", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    controller.stop()


if __name__ == "__main__":
    main()
