"""A man in the middle that strips STARTTLS: a TCP proxy on 127.0.0.1 that forwards an SMTP
session to a real server but rewrites the server's ``STARTTLS`` capability to junk, as
downgrade attackers do. ``from_client`` is every byte the client sent in the clear."""

from __future__ import annotations

import contextlib
import socket
import threading


class StrippingProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.from_client = bytearray()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._sockets += [client, server]
            for source, sink, strip in ((client, server, False), (server, client, True)):
                thread = threading.Thread(
                    target=self._pump, args=(source, sink, strip), daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _pump(self, source: socket.socket, sink: socket.socket, strip: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if strip:
                    data = data.replace(b"STARTTLS", b"XXXXXXXX")
                else:
                    self.from_client += data
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def stop(self) -> None:
        self.listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()
