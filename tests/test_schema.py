"""``docs/schema.sql`` is the schema the migrations produce, on PostgreSQL and SQLite alike, and
names the triggers that count; a released migration is never edited (a change is a new one)."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from layang.migrations import MIGRATIONS, POSTGRESQL, SQLITE
from layang.migrations.schema import (
    HEADER,
    POSTGRESQL_TITLE,
    SQLITE_TITLE,
    postgresql_schema,
    render,
    sections,
    sqlite_schema,
)
from tests.conftest import BACKENDS
from tests.postgres.server import ADMIN_URL
from tests.test_migrations import empty_database, process_env  # noqa: F401 - fixture

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_FILE = ROOT / "docs" / "schema.sql"
REGENERATE = (
    "python -m layang.migrations.schema --postgresql "
    "postgresql://postgres@127.0.0.1:5432/postgres > docs/schema.sql"
)


def held_sections() -> dict[str, str]:
    found = sections(SCHEMA_FILE.read_text())
    assert set(found) == {POSTGRESQL_TITLE, SQLITE_TITLE}, (
        f"docs/schema.sql lacks its {POSTGRESQL_TITLE} or {SQLITE_TITLE} section; "
        f"regenerate it: {REGENERATE}"
    )
    return found


def assert_no_drift(regenerated: str, section: str) -> None:
    held = SCHEMA_FILE.read_text()
    if regenerated == held:
        return
    diff = difflib.unified_diff(
        held.splitlines(), regenerated.splitlines(), "docs/schema.sql", "migrated", lineterm=""
    )
    shown = "\n".join(list(diff)[:80])
    pytest.fail(
        f"docs/schema.sql ({section}) differs from the schema the migrations produce; "
        f"regenerate it: {REGENERATE}\n{shown}"
    )


def test_the_sqlite_section_is_what_the_migrations_make():
    held = held_sections()
    assert_no_drift(render(held[POSTGRESQL_TITLE], sqlite_schema()), SQLITE_TITLE)


def test_the_postgresql_section_is_what_the_migrations_make(postgres_database):
    held = held_sections()  # postgres_database: skips (or fails, in CI) without a server
    assert_no_drift(render(postgresql_schema(ADMIN_URL), held[SQLITE_TITLE]), POSTGRESQL_TITLE)


def test_the_header_names_every_trigger():
    held = held_sections()
    triggers = {
        name
        for body in held.values()
        for name in re.findall(r'^CREATE TRIGGER "?(\w+)"?', body, flags=re.M)
    }
    assert {"activity_count_sent", "activity_count_event"} <= triggers
    unnamed = sorted(name for name in triggers if name not in HEADER)
    assert not unnamed, f"say in layang/migrations/schema.py's HEADER what {unnamed} keep"


# Each released migration's statements, as a digest: sha256 of [SQLite's, PostgreSQL's] as JSON.
RELEASED = {
    1: "2bcb6b2bc8698768",
    2: "9ad6f2441b54edb7",
    3: "3f3f814cb1a0ac66",
    4: "7ef341ef692cff65",
    5: "d5b55eb40e269c11",
    6: "2b87f46e8b0290ba",
    7: "8b9838307d9e01ba",
    8: "a6d6bad9b09e6c68",
    10: "efcb7566e70542b1",
    11: "65c7ab4a32cd2ffe",
    12: "2faef0444941a2a8",
    14: "24a7c43c22418721",
    15: "7c1014a72a594957",
    16: "d7707861ab6cb8cf",
    17: "4d680dce0dce45b4",
    18: "ed9d4ff7f6a20ee3",
    19: "6d9d81730f957b13",
    20: "c7fc37ab6b20e2c0",
    21: "462a0156f6b465f3",
    22: "e508fbe9167f79c6",
    23: "eb403259b9e5cb36",
}


def digest(sqlite: list[str], postgresql: list[str]) -> str:
    return hashlib.sha256(json.dumps([sqlite, postgresql]).encode()).hexdigest()[:16]


def test_released_migrations_are_never_edited():
    """A database already at version N never runs N again: an edit to N reaches only fresh
    databases, and the two then differ. Versions newer than every released one are free."""
    found = {m.version: digest(m.statements(SQLITE), m.statements(POSTGRESQL)) for m in MIGRATIONS}
    edited = sorted(v for v, d in RELEASED.items() if found.get(v) != d)
    assert not edited, (
        f"released migrations {edited} changed: undo that, and make the change a new "
        "migration (layang/migrations/__init__.py says how)"
    )
    unreleased = [v for v in found if v not in RELEASED]
    assert all(v > max(RELEASED) for v in unreleased), f"versions {unreleased} were inserted"


# -- layang db schema ---------------------------------------------------------------------------


def layang_db(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "layang", "db", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_layang_db_schema_prints_the_databases_own_section(empty_database, backend, tmp_path):  # noqa: F811
    url = empty_database()
    env = process_env(tmp_path, url)
    title = SQLITE_TITLE if backend == "sqlite" else POSTGRESQL_TITLE

    if backend == "sqlite":
        sqlite3.connect(url.split(":///", 1)[1]).close()  # a file, but no Layang database
    refused = layang_db(env, "schema")
    assert refused.returncode == 2, refused.stderr
    assert "no Layang database" in refused.stderr
    assert refused.stdout == ""
    assert layang_db(env, "upgrade").returncode == 0

    printed = layang_db(env, "schema")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == held_sections()[title]
