"""The configuration check every command makes before it starts anything.

A setting that cannot work stops the command at once with one line naming the variable and the
fix (``PreflightError``), instead of a traceback from a thread that dies while the rest runs on.
Listen addresses are bound here, and the very sockets are handed to the servers
(``Listeners.take``), so a port cannot be taken by someone else between the check and the start.

A command says what it uses with a ``Needs``. A new listen address is one ``Listener`` (its
variable and Config field) added to the ``listeners`` of the commands that serve it; its server
then takes the bound socket with ``Listeners.take`` instead of binding its own.
"""

from __future__ import annotations

import errno
import os
import socket
import sqlite3
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from layang.config import Config, parse_bind
from layang.db import POSTGRESQL_CONNECT_DEFAULTS, error_summary
from layang.delivery.capture import CaptureDirectory
from layang.delivery.smarthost import RelayConfigError, redact_url, relay_from_url
from layang.destinations.shaping import VARIABLE as SHAPING_VARIABLE
from layang.destinations.shaping import Shaping, ShapingError

CREATE = "create"
"""The command creates the database (and its directory) when it is missing."""
EXISTING = "existing"
"""The command only works on a database that exists; it never creates one."""


class PreflightError(Exception):
    """A setting that cannot work: ``variable`` names it, ``problem`` says why and what to do."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable
        self.problem = problem


class DatabaseUnreachable(PreflightError):
    """The database server did not answer (as opposed to refusing us): it may come back."""


@dataclass(frozen=True)
class Listener:
    """A listen address a command serves on: the variable and the ``Config`` field holding it.
    An empty value means the listener is off."""

    variable: str
    setting: str


HTTP = Listener("LAYANG_HTTP_BIND", "http_bind")
SMTP = Listener("LAYANG_SMTP_BIND", "smtp_bind")
WORKER_METRICS = Listener("LAYANG_WORKER_METRICS_BIND", "worker_metrics_bind")
INBOUND = Listener("LAYANG_INBOUND_BIND", "inbound_bind")


@dataclass(frozen=True)
class Needs:
    """What a command uses, and so what is checked before it starts.

    ``database`` is ``CREATE``, ``EXISTING`` or None (no database); ``relay`` checks
    ``LAYANG_RELAY_URL``; ``smtp_tls`` checks the STARTTLS certificate and key;
    ``database_may_wait``: an unreachable PostgreSQL is only reported, the command starts anyway
    and waits for it (``layang serve`` answers 503 meanwhile).
    """

    database: str | None = CREATE
    relay: bool = False
    smtp_tls: bool = False
    listeners: tuple[Listener, ...] = ()
    database_may_wait: bool = False


@dataclass
class Listeners:
    """The sockets bound for a command's listeners, listening, by variable."""

    sockets: dict[str, socket.socket] = field(default_factory=dict)

    def take(self, listener: Listener) -> socket.socket | None:
        """The bound socket of ``listener`` (None if it is off); the caller now owns it."""
        return self.sockets.pop(listener.variable, None)

    def close(self) -> None:
        """Close every socket not taken."""
        for sock in self.sockets.values():
            sock.close()
        self.sockets.clear()


def check(config: Config, needs: Needs) -> Listeners:
    """Check everything ``needs`` names; returns the bound listeners.

    Raises ``PreflightError`` for the first setting that cannot work (``DatabaseUnreachable``
    when PostgreSQL does not answer), having closed whatever it had bound.
    """
    # A URL derived from the data dir is fixed there, so that is the variable to name.
    if needs.database:
        data_dir = config.follows_data_dir("database_url")
        variable = "LAYANG_DATA_DIR" if data_dir else "LAYANG_DATABASE_URL"
        check_database(config.database_url, needs.database, variable)
    if needs.relay:
        data_dir = config.follows_data_dir("relay_url")
        check_relay(config.relay_url, "LAYANG_DATA_DIR" if data_dir else "LAYANG_RELAY_URL")
        check_sources(config)
    if needs.smtp_tls:
        check_smtp_tls(config)
    check_secret_key(config.secret_key)
    check_shaping(config.shaping_file)
    listeners = Listeners()
    try:
        for listener in needs.listeners:
            bind = getattr(config, listener.setting)
            if bind:
                listeners.sockets[listener.variable] = bind_listener(listener.variable, bind)
    except BaseException:
        listeners.close()
        raise
    return listeners


def check_sources(config: Config) -> None:
    """Every source address must be one of this host's: binding to another fails every
    session."""
    if not config.source_addresses:
        return
    for source in config.sources:
        family = socket.AF_INET6 if ":" in source.address else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((source.address, 0))
        except OSError as error:
            raise PreflightError(
                "LAYANG_SOURCE_ADDRESSES",
                f"{source.address} is not an address of this host ({error.strerror}); "
                "list only addresses assigned to it",
            ) from None


SECRET_KEY_MIN_LENGTH = 32
"""The shortest ``LAYANG_SECRET_KEY`` accepted: 32 characters of ``secrets.token_urlsafe`` carry
192 bits."""

# Values people paste from examples instead of a key of their own (docs/deploy.md shows the
# first), compared without case and punctuation.
KNOWN_PLACEHOLDERS = frozenset(
    {
        "pastethekeyfromthecommandabove",
        "changeme",
        "replaceme",
        "secret",
        "secretkey",
        "yoursecretkey",
        "layangsecretkey",
        "putyoursecretkeyhere",
    }
)


def check_secret_key(key: str) -> None:
    """Refuse a secret key anyone could guess: shorter than ``SECRET_KEY_MIN_LENGTH``
    characters, a known placeholder, or one character repeated. Every token and session it signs,
    and every DKIM key it encrypts, is only as safe as this key."""
    how = 'make one with: python3 -c "import secrets; print(secrets.token_urlsafe(48))"'
    folded = "".join(c for c in key.lower() if c.isalnum())
    if folded in KNOWN_PLACEHOLDERS or len(set(folded)) <= 1:
        raise PreflightError("LAYANG_SECRET_KEY", f"that is an example's placeholder; {how}")
    if len(key) < SECRET_KEY_MIN_LENGTH:
        raise PreflightError(
            "LAYANG_SECRET_KEY",
            f"{len(key)} characters is too short to keep tokens, sessions and DKIM keys safe "
            f"(at least {SECRET_KEY_MIN_LENGTH}); {how}",
        )


def check_shaping(path: str) -> None:
    """A shaping file that cannot be used stops every command, not only the senders: an
    operator learns of the mistake on the first command run."""
    try:
        Shaping.load(path or None)
    except ShapingError as error:
        raise PreflightError(SHAPING_VARIABLE, error.problem) from None


# -- directories ---------------------------------------------------------------------------------


def check_writable_dir(variable: str, directory: Path) -> None:
    """``directory`` exists and is writable, or can be created: something can be made in it, or
    in its nearest existing ancestor. Leaves nothing behind."""
    path = Path(directory).absolute()
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise PreflightError(variable, f"{existing} is a file, so {path} cannot be a directory")
    try:
        # Tried rather than judged from permission bits: root passes those, and still cannot
        # write to a read-only file system.
        os.rmdir(tempfile.mkdtemp(prefix=".layang-check-", dir=existing))
    except OSError as error:
        what = f"write to {path}" if existing == path else f"create {path}"
        raise PreflightError(
            variable, f"cannot {what} ({error.strerror}); choose a writable directory"
        ) from None


# -- the database --------------------------------------------------------------------------------


def database_location(url: str) -> str:
    """The database URL as shown to a person: an absolute SQLite path, no password."""
    if url.startswith("sqlite:"):
        path = sqlite_path(url)
        return f"sqlite:///{path}" if path else url
    return redact_url(url)


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL, absolute; None for an in-memory database."""
    path = url.split(":///", 1)[-1].split("?", 1)[0] if ":///" in url else ""
    if not path or path == ":memory:":
        return None
    return Path(path).absolute()


def check_database(url: str, mode: str, variable: str = "LAYANG_DATABASE_URL") -> None:
    """The URL names a database Layang supports, and it can be used: a SQLite file that can be
    created (``CREATE``) or exists (``EXISTING``), a PostgreSQL server that lets us in.
    ``variable`` is the one named in the error."""
    if url.startswith("sqlite:"):
        if not url.startswith("sqlite:///"):
            raise PreflightError(
                variable, "write a SQLite URL as sqlite:///relative/path.db or sqlite:////abs.db"
            )
        path = sqlite_path(url)
        if path is None:
            return
        if path.is_dir():
            raise PreflightError(variable, f"{path} is a directory; name the database file")
        if mode == EXISTING and not _sqlite_has_accounts_table(path):
            raise NoDatabase(url)
        if path.exists():
            if not os.access(path, os.R_OK | os.W_OK):
                raise PreflightError(variable, f"cannot read and write {path}: permission denied")
            check_writable_dir(variable, path.parent)  # SQLite keeps its journal beside it
        else:
            check_writable_dir(variable, path.parent)
    elif url.startswith(("postgresql://", "postgres://")):
        check_postgresql(url)
    else:
        scheme = url.partition(":")[0] or url
        raise PreflightError(
            variable,
            f"{scheme}:// is not supported, only sqlite:// (sqlite:///path/layang.db, the "
            "default) and postgresql:// (postgresql://user:password@host/database)",
        )


def _sqlite_has_accounts_table(path: Path) -> bool:
    if not path.is_file():
        return False
    # Read-only: opening it as the service does would switch an unrelated file to WAL.
    try:
        connection = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        return bool(
            connection.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'account'"
            ).fetchall()
        )
    except sqlite3.Error:
        return False
    finally:
        connection.close()


class NoDatabase(PreflightError):
    """The command needs existing data, and the database is not there (or has no schema)."""

    def __init__(self, url: str) -> None:
        super().__init__(
            "LAYANG_DATABASE_URL",
            f"no Layang database at {database_location(url)}, so it holds no accounts; "
            "create one with `layang accounts create NAME` or `layang run`, or set "
            "LAYANG_DATA_DIR (or LAYANG_DATABASE_URL) to the one you meant",
        )


# Fragments of libpq's messages when no server answered, as opposed to one that refused us.
_NO_ANSWER = (
    "connection refused",
    "timeout expired",
    "could not translate host name",
    "no route to host",
    "network is unreachable",
    "no such file or directory",
    "server closed the connection unexpectedly",
    "the database system is starting up",
    "the database system is shutting down",
)


def check_postgresql(url: str) -> None:
    """The driver is installed and the server accepts our credentials for the database."""
    variable = "LAYANG_DATABASE_URL"
    try:
        import psycopg2
    except ImportError:
        raise PreflightError(
            variable, "PostgreSQL needs the driver: pip install 'layang[postgresql]'"
        ) from None
    from playhouse.db_url import parse as parse_url

    try:
        params = {
            **POSTGRESQL_CONNECT_DEFAULTS,
            **parse_url(url, unquote_password=True, unquote_user=True),
        }
    except ValueError as error:
        raise PreflightError(variable, f"cannot read {redact_url(url)}: {error}") from None
    name = params.pop("database", None)
    if not name:
        raise PreflightError(
            variable, f"{redact_url(url)} names no database: postgresql://user@host/DATABASE"
        )
    try:
        connection = psycopg2.connect(dbname=name, **params)
    except psycopg2.Error as error:
        reason = error_summary(error)
        where = redact_url(url)
        if any(fragment in reason.lower() for fragment in _NO_ANSWER):
            raise DatabaseUnreachable(
                variable, f"PostgreSQL at {where} does not answer: {reason}"
            ) from None
        raise PreflightError(variable, f"PostgreSQL at {where} refused: {reason}") from None
    connection.close()


# -- the relay and TLS ---------------------------------------------------------------------------


def check_relay(url: str, variable: str = "LAYANG_RELAY_URL") -> None:
    """The relay URL is well formed, its cafile loads, and a capture directory is writable."""
    if url.strip() != "mx:" and url.strip().lower().rstrip(":/") == "mx":
        # "mx", "MX:" or "mx://": direct to MX was meant, and is spelt exactly "mx:".
        raise PreflightError(
            variable, f"{url!r} is not a relay URL; for direct to MX write mx: (with its colon)"
        )
    if url.startswith("mx:"):
        if url.strip() != "mx:":
            raise PreflightError(variable, "mx: takes nothing after the colon (direct to MX)")
        return
    try:
        relay = relay_from_url(url)
    except RelayConfigError as error:
        raise PreflightError(variable, str(error)) from None
    if isinstance(relay, CaptureDirectory):
        check_writable_dir(variable, relay.directory)


def ehlo_warnings(config: Config) -> list[str]:
    """Lines warning that direct to MX would greet receivers with ``localhost`` or a name that
    is not fully qualified, which many refuse or junk (docs/deploy.md, "Direct to MX"); empty
    when the relay is not ``mx:`` or every name is a full one. Never raises: the command still
    starts."""
    if config.relay_url.strip() != "mx:":
        return []
    if config.source_addresses:
        greetings = [
            (source.ehlo_name, f"LAYANG_SOURCE_ADDRESSES ({source.address})")
            for source in config.sources
        ]
    else:
        greetings = [(config.helo_name, "LAYANG_EHLO_NAME" if config.ehlo_name else "")]
    lines = []
    for name, origin in dict.fromkeys(greetings):
        if "." in name.strip(".") and not name.startswith("localhost"):
            continue
        source = f"from {origin}" if origin else "this host's name, as the system gives it"
        lines.append(
            f"warning: direct to MX will say EHLO {name} ({source}), which is not a fully "
            "qualified name: receivers refuse or junk such mail. Set LAYANG_EHLO_NAME (or "
            "LAYANG_SOURCE_ADDRESSES=ip=name) to the name the source address's PTR record gives"
        )
    return lines


def check_smtp_tls(config: Config) -> None:
    """The STARTTLS pair: both files or neither, readable, a certificate and its own key."""
    cert, key = config.smtp_tls_cert, config.smtp_tls_key
    if not cert and not key:
        check_writable_dir("LAYANG_DATA_DIR", config.data_dir)  # the self-signed pair goes there
        return
    if not cert or not key:
        given, missing = (
            ("LAYANG_SMTP_TLS_CERT", "LAYANG_SMTP_TLS_KEY")
            if cert
            else ("LAYANG_SMTP_TLS_KEY", "LAYANG_SMTP_TLS_CERT")
        )
        raise PreflightError(missing, f"set it too ({given} is set), or neither of them")
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert_bytes = _read("LAYANG_SMTP_TLS_CERT", cert)
    key_bytes = _read("LAYANG_SMTP_TLS_KEY", key)
    try:
        x509.load_pem_x509_certificates(cert_bytes)
    except ValueError:
        raise PreflightError("LAYANG_SMTP_TLS_CERT", f"{cert} holds no PEM certificate") from None
    try:
        serialization.load_pem_private_key(key_bytes, password=None)
    except (ValueError, TypeError):
        raise PreflightError(
            "LAYANG_SMTP_TLS_KEY", f"{key} holds no unencrypted PEM private key"
        ) from None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as error:
        raise PreflightError(
            "LAYANG_SMTP_TLS_KEY", f"{key} is not the key of the certificate in {cert} ({error})"
        ) from None


def _read(variable: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise PreflightError(variable, f"cannot read {path}: {error.strerror}") from None


# -- listen addresses ----------------------------------------------------------------------------


def bind_listener(variable: str, bind: str) -> socket.socket:
    """A TCP socket bound to ``bind`` (host:port) and listening, as the servers bind theirs."""
    host, port = parse_bind(bind, variable)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise PreflightError(
            variable, f"cannot resolve {host!r} ({error.strerror}); use an address of this machine"
        ) from None
    # A name with both (localhost) is served on IPv4, as the servers would pick it.
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as error:
        sock.close()
        raise PreflightError(variable, _bind_problem(bind, port, error)) from None
    return sock


def _bind_problem(bind: str, port: int, error: OSError) -> str:
    if error.errno == errno.EADDRINUSE:
        return f"{bind} is already in use; stop what listens there or choose another port"
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{bind} is not an address of this machine; use one of its own, or 0.0.0.0"
    if error.errno == errno.EACCES:
        return f"listening on port {port} needs privileges; use a port above 1023"
    return f"cannot listen on {bind}: {error.strerror}"
