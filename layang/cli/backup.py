"""``layang db backup PATH``: a consistent copy of the database taken while Layang runs
(docs/deploy.md, "Backup and restore")."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import click

from layang.cli.output import emit
from layang.cli.startup import fail, prepare
from layang.cli.uses import STORE, Uses
from layang.serving.preflight import EXISTING, Needs, sqlite_path


def backup_sqlite(source: Path, target: Path) -> None:
    """Copy the SQLite database ``source`` to ``target`` with SQLite's online backup API, in
    one step: the copy is the database as one transaction saw it (writers go on meanwhile in
    WAL mode). Written beside ``target`` and renamed into place, readable by its owner only."""
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(descriptor)
    origin = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    copy = sqlite3.connect(partial)
    try:
        origin.backup(copy, pages=-1)
        copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
    finally:
        copy.close()
        origin.close()
    partial.replace(target)


def backup_postgresql(url: str, target: Path) -> None:
    """Dump the PostgreSQL database ``url`` to ``target`` with ``pg_dump --format=custom``
    (one snapshot, taken while writers go on); restore with ``pg_restore``. Raises
    ``FileNotFoundError`` when pg_dump is not installed and ``CalledProcessError`` when it
    fails."""
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    pg_dump = shutil.which("pg_dump")
    if pg_dump is None:
        raise FileNotFoundError("pg_dump")
    subprocess.run(
        [pg_dump, "--format=custom", "--no-owner", f"--file={partial}", f"--dbname={url}"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    os.chmod(partial, 0o600)
    partial.replace(target)


@Uses(Needs(EXISTING), STORE)
@click.command("backup")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def db_backup(path: Path) -> None:
    """Copy the database to PATH while Layang runs: SQLite's online backup (a database file),
    or pg_dump's custom format on PostgreSQL (restore with pg_restore); prints {"path",
    "bytes"}."""
    config, _ = prepare()
    target = path.absolute()
    source = sqlite_path(config.database_url)
    try:
        if config.database_url.startswith("sqlite:"):
            if source is None or not source.exists():
                fail(f"No SQLite database at {source}: nothing to back up.", 1)
            backup_sqlite(source, target)
        else:
            backup_postgresql(config.database_url, target)
    except FileNotFoundError:
        fail("pg_dump is not installed: install the PostgreSQL client (postgresql-client).", 1)
    except subprocess.CalledProcessError as error:
        fail(f"pg_dump failed: {error.stderr.decode(errors='replace').strip()}", 1)
    except (OSError, sqlite3.Error) as error:
        fail(f"The backup failed: {error}", 1)
    emit({"path": str(target), "bytes": target.stat().st_size})
