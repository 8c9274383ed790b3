"""A local SMTP sink for the benchmarks: accepts everything, keeps nothing.

python bench/smtp_sink.py PORT
"""

from __future__ import annotations

import signal
import sys
import threading

from aiosmtpd.controller import Controller


class Sink:
    async def handle_DATA(self, server, session, envelope) -> str:
        return "250 2.0.0 OK"


def main() -> None:
    port = int(sys.argv[1])
    controller = Controller(
        Sink(), hostname="127.0.0.1", port=port, server_hostname="sink.bench", data_size_limit=0
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
