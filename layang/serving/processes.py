"""Running the processes: the HTTP server (gunicorn, or a threaded one inside ``layang run``) and
the sender worker, with clean shutdown on SIGINT/SIGTERM."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from werkzeug.serving import make_server

from layang.config import Config
from layang.serving.preflight import HTTP, INBOUND, SMTP, WORKER_METRICS, Listeners

if TYPE_CHECKING:
    from layang.delivery.worker import Worker
    from layang.inbound.server import InboundController
    from layang.submission.server import SubmissionController

log = logging.getLogger("layang.serving")


def upgrade_schema_hook(config: Config) -> Callable[[Any], None]:
    """gunicorn's ``on_starting`` hook: upgrade the schema once, in the master, before any fork.

    The workers inherit the record that it was done (``layang.migrations.upgrade_once``), so each
    only opens the database. If PostgreSQL cannot be reached yet, the master starts anyway and
    each worker upgrades before its first request that finds the database back (``init_db``).
    """

    def on_starting(server: Any) -> None:
        from layang.db import close_before_fork
        from layang.logs import configure_logging
        from layang.serving.app import init_db

        configure_logging(config)
        raise_open_file_limit()
        close_before_fork()  # with preload_app, create_app has already opened one here
        init_db(config)
        close_before_fork()

    return on_starting


def raise_open_file_limit() -> None:
    """Raise this process's soft open-file limit to its hard limit; children inherit it.

    Every client connection, slow ones included, is a file descriptor, and the soft limit is
    often 1024 where the hard one allows far more (systemd: ``LimitNOFILE``).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        log.info("open-file limit raised from %d to %d", soft, hard)


def pre_fork(server: Any, worker: Any) -> None:
    """gunicorn hook, in the master before each fork: a child must not inherit its connection.

    The master opens one for the schema upgrade, and with ``preload_app`` for ``create_app``.
    """
    from layang.db import close_before_fork

    close_before_fork()


def post_fork(server: Any, worker: Any) -> None:
    """gunicorn hook, in each new worker: open connections of its own, never the master's."""
    from layang.db import forget_inherited_connection

    forget_inherited_connection()


def gunicorn_settings(config: Config) -> dict[str, Any]:
    """Settings shared by ``layang serve`` and ``gunicorn -c gunicorn.conf.py wsgi:app``."""
    from layang.serving.body_budget import MIB
    from layang.serving.http_front import buffering_worker

    return {
        "on_starting": upgrade_schema_hook(config),
        "pre_fork": pre_fork,
        "post_fork": post_fork,
        "bind": config.http_bind,
        # Request threads let concurrent sends share one SQLite commit (layang.db.GroupCommit):
        # on 2 cores, 1-2 processes of 8 threads took ~1.3x the sends/s of sync workers. Few
        # processes, because gthread's keep-alive puts many connections on one process anyway.
        # gthread whose threads only take complete requests (layang.serving.http_front): slow
        # clients cost a file descriptor each, not a thread.
        "worker_class": (
            buffering_worker(config.max_request_body_bytes, config.http_body_budget_mb * MIB)
            if config.http_threads > 1
            else "sync"
        ),
        "workers": config.http_workers,
        "threads": config.http_threads,
        # Idle kept-alive connections wait in the event loop, not in a thread.
        "keepalive": 15,
        "worker_connections": 1000,
        "accesslog": "-",
        "errorlog": "-",
        "timeout": 60,
        "graceful_timeout": 30,
        "forwarded_allow_ips": "127.0.0.1,::1",
        # gunicorn's control socket defaults to one path per user ($XDG_RUNTIME_DIR/gunicorn.ctl),
        # which a second server on the host would take over; Layang is managed with signals.
        "control_socket_disable": True,
    }


def serve_gunicorn(config: Config, listener: socket.socket | None = None) -> None:
    """Run the HTTP API under gunicorn in the foreground, on ``listener`` (a bound, listening
    socket, see ``layang.serving.preflight``) or else on ``LAYANG_HTTP_BIND``."""
    from gunicorn.app.base import BaseApplication
    from gunicorn.arbiter import Arbiter
    from gunicorn.sock import TCP6Socket, TCPSocket

    from layang.serving.app import create_app

    class Application(BaseApplication):
        def load_config(self) -> None:
            for key, value in gunicorn_settings(config).items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            return create_app(config)

        def run(self) -> None:
            arbiter = Arbiter(self)
            if listener is not None:
                kind = TCP6Socket if listener.family == socket.AF_INET6 else TCPSocket
                # gunicorn takes the descriptor over and closes it; it gets its own copy.
                address = listener.getsockname()[:2]
                arbiter.LISTENERS = [
                    kind(address, self.cfg, arbiter.log, fd=os.dup(listener.fileno()))
                ]
                listener.close()
            arbiter.run()

    Application().run()


def on_stop_signal(stop: threading.Event) -> None:
    """Set ``stop`` on SIGINT or SIGTERM (the first one; a second SIGINT interrupts hard)."""

    def handler(signum: int, frame: Any) -> None:
        log.info("stopping on signal %s", signal.Signals(signum).name)
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def start_worker(config: Config, metrics_listener: socket.socket | None = None) -> Worker:
    """The worker of ``layang worker`` (and ``layang run``), its metrics already served on
    ``metrics_listener`` if given; ``.run(stop)`` delivers."""
    from layang.delivery.worker import Worker

    if metrics_listener is not None:
        from layang.metrics import serve_process_metrics

        serve_process_metrics(metrics_listener)
    from layang.destinations import tlsrpt
    from layang.domain import inbound_mail
    from layang.lifecycle import housekeeping, partitions, retention

    # Yesterday's TLS-RPT reports go out once, from whichever worker gets there first.
    return Worker(
        config,
        chores=[
            housekeeping.delete_expired,
            partitions.make_ahead,
            lambda: retention.apply(config, budget_seconds=retention.WORKER_BUDGET_SECONDS),
            lambda: tlsrpt.due_reports(config),
            lambda: inbound_mail.delete_old(config),
        ],
    )


def run_sender(
    config: Config, worker: Worker, stop: threading.Event, *, webhooks: bool = True
) -> None:
    """Deliver mail with ``worker`` (and webhooks, unless told not to) until ``stop``.
    Webhooks go out from a thread of their own, so a slow endpoint never slows the mail."""
    from layang.webhooks.dispatcher import Dispatcher

    thread = None
    if webhooks:
        thread = threading.Thread(target=Dispatcher(config).run, args=(stop,), name="webhooks")
        thread.start()
    try:
        worker.run(stop)
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=config.lease_seconds + 15)


def fork_workers(count: int) -> tuple[int, list[int]]:
    """Fork ``count - 1`` more worker processes, before any thread or connection exists.

    Returns (this process's index, the children's pids): 0 and the pids in the first process,
    the child's index and no pids in each child. A child dies with the first process (killed
    or not), so a killed ``layang worker`` leaves nothing sending behind it.
    """
    children: list[int] = []
    parent = os.getpid()
    for index in range(1, count):
        pid = os.fork()
        if pid == 0:
            _die_with(parent)
            return index, []
        children.append(pid)
    return 0, children


def _die_with(parent: int) -> None:
    import ctypes

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        log.warning("cannot tie the worker process to its parent")
    if os.getppid() != parent:
        os._exit(0)


def stop_children(children: list[int], timeout: float) -> None:
    """Ask every child worker to stop (SIGTERM), and wait up to ``timeout`` for them."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for pid in children:
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done:
                break
            if time.monotonic() >= deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.05)


def start_smtpd(config: Config, listener: socket.socket | None = None) -> SubmissionController:
    """The submission server, started on ``listener`` (or on ``LAYANG_SMTP_BIND``)."""
    from layang.submission.server import submission_server

    server = submission_server(config, listener)
    server.start()
    log.info("smtp submission listening on %s", config.smtp_bind)
    return server


def serve_until(stop: threading.Event, server: SubmissionController | InboundController) -> None:
    stop.wait()
    server.stop()


def start_inbound(config: Config, listener: socket.socket | None = None) -> InboundController:
    """The bounce and complaint server, started on ``listener`` (or on ``LAYANG_INBOUND_BIND``)."""
    from layang.inbound.server import inbound_server

    server = inbound_server(config, listener)
    server.start()
    log.info("inbound smtp listening on %s", config.inbound_bind)
    return server


def run_all(
    config: Config,
    stop: threading.Event,
    listeners: Listeners,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """``layang run``: HTTP API, sender worker, SMTP submission and inbound servers in one
    process until ``stop``.

    Everything that can fail at start (the database, the servers on ``listeners``) is set up
    before any of them runs, so a failure leaves nothing half started.
    """
    from layang.serving.app import create_app

    app = create_app(config)
    host, port = config.http_host_port
    http_listener = listeners.take(HTTP)
    fd = None if http_listener is None else http_listener.fileno()
    http = make_server(host, port, app, threaded=True, fd=fd)
    if http_listener is not None:
        http_listener.close()  # the server serves its own copy
    try:
        smtpd = start_smtpd(config, listeners.take(SMTP))
    except BaseException:
        http.server_close()
        raise
    try:
        inbound = start_inbound(config, listeners.take(INBOUND))
        worker = start_worker(config, listeners.take(WORKER_METRICS))
    except BaseException:
        http.server_close()
        smtpd.stop()
        raise
    threads = [
        threading.Thread(target=http.serve_forever, name="http", daemon=True),
        threading.Thread(target=run_sender, args=(config, worker, stop), name="worker"),
        threading.Thread(target=serve_until, args=(stop, smtpd), name="smtpd"),
        threading.Thread(target=serve_until, args=(stop, inbound), name="inbound"),
    ]
    for thread in threads:
        thread.start()
    log.info(
        "layang running http=http://%s:%d smtp=%s inbound=%s relay=%s pid=%d",
        host,
        port,
        config.smtp_bind,
        config.inbound_bind,
        config.relay_url,
        os.getpid(),
    )
    if on_ready:
        on_ready()
    stop.wait()
    http.shutdown()
    for thread in threads:
        thread.join(timeout=30)
    log.info("layang stopped")
