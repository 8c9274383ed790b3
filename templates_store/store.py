"""Templates of an account: create, read, list, update (a new version each time), delete, render.

Every function takes the account's id first; a template of another account is reported as
:class:`TemplateNotFound`, exactly like a missing one. The models must be bound to a database
before use (see :mod:`templates_store.models`).
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Final

import peewee

from templates_store.css import inline_css
from templates_store.errors import (
    InvalidTemplate,
    PreconditionFailed,
    TemplateConflict,
    TemplateNotFound,
    TemplateSyntaxError,
)
from templates_store.models import MODELS, Template, TemplateVersion
from templates_store.render import (
    BODY_HTML,
    CompiledTemplate,
    RenderedContent,
    TemplateCache,
    compile_template,
)

ID_PATTERN: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
MAX_NAME_LENGTH: Final = 200
MAX_LIST_LIMIT: Final = 1000
_ID_ALPHABET: Final = "abcdefghijklmnopqrstuvwxyz234567"
_UPDATE_ATTEMPTS: Final = 5


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final[Any] = _Unset()
"""Default of :func:`update_template`'s fields: keep the current value."""

cache = TemplateCache(maxsize=256)
"""Compiled templates of this process, keyed ``(account_id, template_id, version, revision)``."""


def generate_template_id() -> str:
    """20 random lowercase base32 characters (100 bits); always matches :data:`ID_PATTERN`."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(20))


@dataclass(frozen=True, slots=True)
class TemplateRecord:
    """A template as the API shows it: its current version, with the HTML as the client sent
    it (the CSS-inlined copy that is sent is in :class:`TemplateVersionRecord`). Timestamps
    are epoch milliseconds."""

    id: str
    name: str
    subject: str | None
    body_html: str | None
    body_text: str | None
    version: int
    shortcodes: tuple[str, ...]
    created_at: int
    updated_at: int

    @property
    def etag(self) -> str:
        """Strong entity tag of this version, e.g. ``"welcome-v3"`` (quotes included)."""
        return f'"{self.id}-v{self.version}"'


def version_from_etag(etag: str, template_id: str) -> int | None:
    """The version named by an entity tag of :attr:`TemplateRecord.etag` for ``template_id``
    (``W/`` prefix tolerated), or ``None`` if ``etag`` is not one."""
    value = etag.strip().removeprefix("W/")
    prefix = f'"{template_id}-v'
    if not (value.startswith(prefix) and value.endswith('"')):
        return None
    number = value[len(prefix) : -1]
    if not number.isascii() or not number.isdigit() or len(number) > 9:
        return None
    return int(number)


@dataclass(frozen=True, slots=True)
class TemplateVersionRecord:
    """One stored version, as needed to send it. ``body_html`` is the CSS-inlined HTML that is
    rendered; ``source_html`` the HTML as the client sent it."""

    template_id: str
    version: int
    revision: str
    name: str
    subject: str | None
    body_html: str | None
    source_html: str | None
    body_text: str | None
    shortcodes: tuple[str, ...]
    created_at: int


@dataclass(frozen=True, slots=True)
class _Prepared:
    body_html: str | None
    shortcodes: tuple[str, ...]
    compiled: CompiledTemplate


@dataclass(frozen=True, slots=True)
class TemplatePage:
    """One page of :func:`list_templates`; ``next_cursor`` is ``None`` on the last page."""

    items: tuple[TemplateRecord, ...]
    next_cursor: str | None


def now_ms() -> int:
    """Now, in integer milliseconds since the epoch (UTC): the unit of every timestamp here."""
    return time.time_ns() // 1_000_000


def _db() -> peewee.Database:
    database = Template._meta.database
    if database is None:
        raise RuntimeError("templates_store models are not bound to a database")
    return database


WriteTransaction = Callable[[peewee.Database], AbstractContextManager[Any]]
_write_transaction: WriteTransaction | None = None


def bind(
    database: peewee.Database | peewee.DatabaseProxy,
    *,
    write_transaction: WriteTransaction | None = None,
) -> None:
    """Keep the templates in ``database``; every write runs in ``write_transaction(db)`` when
    given (an application's own, say one that queues writers), else in ``_writing``'s."""
    global _write_transaction
    for model in MODELS:
        model.bind(database)
    _write_transaction = write_transaction


def _writing() -> AbstractContextManager[Any]:
    """A write transaction that takes SQLite's write lock at BEGIN: one that reads before it
    writes would otherwise fail at once when another writer got in between."""
    database = _db()
    if _write_transaction is not None:
        return _write_transaction(database)
    if isinstance(database, peewee.SqliteDatabase):
        return database.atomic("IMMEDIATE")
    return database.atomic()


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidTemplate("name", "name must be a non-empty string")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTemplate("name", f"name must be at most {MAX_NAME_LENGTH} characters")
    return name


def _check_part(field: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidTemplate(field, f"{field} must be a string or null")
    return value


def _prepare(subject: str | None, body_html: str | None, body_text: str | None) -> _Prepared:
    """Validate the parts as the client wrote them, then inline CSS and compile what is sent.

    Line numbers in syntax errors refer to the client's source. If the inlined HTML does not
    compile (which would mean inlining broke template syntax), the source HTML is kept as is.
    """
    names = tuple(compile_template(subject, body_html, body_text).shortcodes)
    sent_html = inline_css(body_html) if body_html else body_html
    try:
        compiled = compile_template(subject, sent_html, body_text)
    except TemplateSyntaxError as exc:
        if exc.part != BODY_HTML:
            raise
        sent_html = body_html
        compiled = compile_template(subject, sent_html, body_text)
    return _Prepared(sent_html, names, compiled)


def _template_record(template: Template, version: TemplateVersion) -> TemplateRecord:
    return TemplateRecord(
        id=template.template_id,
        name=template.name,
        subject=version.subject,
        body_html=version.source_html,
        body_text=version.body_text,
        version=version.version,
        shortcodes=tuple(json.loads(version.shortcodes)),
        created_at=template.created_at,
        updated_at=template.updated_at,
    )


def _version_record(template_id: str, version: TemplateVersion) -> TemplateVersionRecord:
    return TemplateVersionRecord(
        template_id=template_id,
        version=version.version,
        revision=version.revision,
        name=version.name,
        subject=version.subject,
        body_html=version.body_html,
        source_html=version.source_html,
        body_text=version.body_text,
        shortcodes=tuple(json.loads(version.shortcodes)),
        created_at=version.created_at,
    )


def _current(account_id: int, template_id: str) -> tuple[Template, TemplateVersion]:
    row = (
        TemplateVersion.select(TemplateVersion, Template)
        .join(Template)
        .where(
            (Template.account_id == account_id)
            & (Template.template_id == template_id)
            & (TemplateVersion.version == Template.current_version)
        )
        .get_or_none()
    )
    if row is None:
        raise TemplateNotFound(f"template {template_id!r} not found")
    return row.template, row


def _new_version(
    template: Template,
    number: int,
    name: str,
    subject: str | None,
    source_html: str | None,
    body_text: str | None,
    prepared: _Prepared,
    created_at: int,
) -> TemplateVersion:
    return TemplateVersion.create(
        template=template,
        version=number,
        revision=secrets.token_hex(16),
        name=name,
        subject=subject,
        source_html=source_html,
        body_html=prepared.body_html,
        body_text=body_text,
        shortcodes=json.dumps(list(prepared.shortcodes)),
        created_at=created_at,
    )


def _cache_key(account_id: int, template_id: str, version: int, revision: str) -> tuple:
    return (account_id, template_id, version, revision)


def create_template(
    account_id: int,
    *,
    template_id: str | None = None,
    name: str,
    subject: str | None = None,
    body_html: str | None = None,
    body_text: str | None = None,
) -> TemplateRecord:
    """Create a template at version 1; ``template_id`` is generated when not given.

    Raises :class:`InvalidTemplate` (malformed id or name, non-string part),
    :class:`TemplateSyntaxError` (a part does not parse) and :class:`TemplateConflict` (the id
    is taken in this account).
    """
    if template_id is None:
        template_id = generate_template_id()
    elif not isinstance(template_id, str) or not ID_PATTERN.fullmatch(template_id):
        raise InvalidTemplate(
            "id", "id must match [a-z0-9][a-z0-9_-]{0,63} (lowercase letters, digits, _ and -)"
        )
    _check_name(name)
    for field, value in (("subject", subject), ("bodyHtml", body_html), ("bodyText", body_text)):
        _check_part(field, value)
    prepared = _prepare(subject, body_html, body_text)
    now = now_ms()
    try:
        with _writing():
            template = Template.create(
                account_id=account_id,
                template_id=template_id,
                name=name,
                current_version=1,
                created_at=now,
                updated_at=now,
            )
            version = _new_version(template, 1, name, subject, body_html, body_text, prepared, now)
    except peewee.IntegrityError:
        raise TemplateConflict(f"template {template_id!r} already exists") from None
    cache.put(_cache_key(account_id, template_id, 1, version.revision), prepared.compiled)
    return _template_record(template, version)


def get_template(account_id: int, template_id: str) -> TemplateRecord:
    """The template's current version. Raises :class:`TemplateNotFound`."""
    return _template_record(*_current(account_id, template_id))


def list_templates(account_id: int, *, limit: int = 50, after: str | None = None) -> TemplatePage:
    """Templates of the account ordered by id, at most ``limit`` of them, starting after the id
    ``after`` (keyset paging: templates added or removed meanwhile never shift a page).

    Raises ``ValueError`` when ``limit`` is not between 1 and :data:`MAX_LIST_LIMIT`.
    """
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIST_LIMIT}")
    condition = (Template.account_id == account_id) & (
        TemplateVersion.version == Template.current_version
    )
    if after:
        condition &= Template.template_id > after
    # One row more than asked tells whether another page follows, without a COUNT.
    rows = list(
        TemplateVersion.select(TemplateVersion, Template)
        .join(Template)
        .where(condition)
        .order_by(Template.template_id)
        .limit(limit + 1)
    )
    following = rows[limit - 1].template.template_id if len(rows) > limit else None
    return TemplatePage(tuple(_template_record(r.template, r) for r in rows[:limit]), following)


def update_template(
    account_id: int,
    template_id: str,
    *,
    name: str = UNSET,
    subject: str | None = UNSET,
    body_html: str | None = UNSET,
    body_text: str | None = UNSET,
    if_match_version: int | None = None,
) -> TemplateRecord:
    """Save a new version. A field left :data:`UNSET` keeps its current value; ``None`` removes a
    part. Every call creates a version, even when nothing changes.

    With ``if_match_version``, the update applies only if it is still the current version,
    else :class:`PreconditionFailed`. Without it, a concurrent update is retried on top of the
    newer version. Raises :class:`TemplateNotFound`, :class:`InvalidTemplate`,
    :class:`TemplateSyntaxError`.
    """
    if name is not UNSET:
        _check_name(name)
    for field, value in (("subject", subject), ("bodyHtml", body_html), ("bodyText", body_text)):
        if value is not UNSET:
            _check_part(field, value)
    for _ in range(_UPDATE_ATTEMPTS):
        template, current = _current(account_id, template_id)
        if if_match_version is not None and current.version != if_match_version:
            raise PreconditionFailed(
                f"template {template_id!r} is at version {current.version}, not {if_match_version}",
                current_version=current.version,
            )
        new_name = template.name if name is UNSET else name
        new_subject = current.subject if subject is UNSET else subject
        new_html = current.source_html if body_html is UNSET else body_html
        new_text = current.body_text if body_text is UNSET else body_text
        prepared = _prepare(new_subject, new_html, new_text)
        number = current.version + 1
        now = now_ms()
        with _writing():
            # Compare-and-set on current_version: of two concurrent updates, one wins.
            won = (
                Template.update(current_version=number, name=new_name, updated_at=now)
                .where((Template.id == template.id) & (Template.current_version == current.version))
                .execute()
            )
            if won:
                version = _new_version(
                    template, number, new_name, new_subject, new_html, new_text, prepared, now
                )
        if won:
            cache.put(
                _cache_key(account_id, template_id, number, version.revision), prepared.compiled
            )
            template.current_version = number
            template.name = new_name
            template.updated_at = now
            return _template_record(template, version)
        if if_match_version is not None:
            raise PreconditionFailed(
                f"template {template_id!r} changed during the update",
                current_version=None,
            )
    raise PreconditionFailed(f"template {template_id!r} is being updated concurrently")


def delete_template(account_id: int, template_id: str) -> None:
    """Delete the template and all its versions. Raises :class:`TemplateNotFound`."""
    with _writing():
        template = Template.get_or_none(
            (Template.account_id == account_id) & (Template.template_id == template_id)
        )
        if template is None:
            raise TemplateNotFound(f"template {template_id!r} not found")
        TemplateVersion.delete().where(TemplateVersion.template == template.id).execute()
        template.delete_instance()
    cache.discard(lambda key: key[:2] == (account_id, template_id))


def get_version(account_id: int, template_id: str, version: int) -> TemplateVersionRecord:
    """A stored version (current or older). Raises :class:`TemplateNotFound`."""
    row = (
        TemplateVersion.select()
        .join(Template)
        .where(
            (Template.account_id == account_id)
            & (Template.template_id == template_id)
            & (TemplateVersion.version == version)
        )
        .get_or_none()
    )
    if row is None:
        raise TemplateNotFound(f"template {template_id!r} has no version {version}")
    return _version_record(template_id, row)


def compiled_version(
    account_id: int, template_id: str, version: int | None = None
) -> tuple[int, CompiledTemplate]:
    """The compiled template of ``version`` (the current version when ``None``) and its number,
    from the cache when possible: one indexed query on a hit.

    Use it to render one version for many recipients. Raises :class:`TemplateNotFound`.
    """
    condition = (Template.account_id == account_id) & (Template.template_id == template_id)
    if version is None:
        condition &= TemplateVersion.version == Template.current_version
    else:
        condition &= TemplateVersion.version == version
    row = (
        TemplateVersion.select(
            TemplateVersion.id, TemplateVersion.version, TemplateVersion.revision
        )
        .join(Template)
        .where(condition)
        .get_or_none()
    )
    if row is None:
        what = "a current version" if version is None else f"version {version}"
        raise TemplateNotFound(f"template {template_id!r} has no {what}")
    key = _cache_key(account_id, template_id, row.version, row.revision)

    def load() -> CompiledTemplate:
        stored = TemplateVersion.get_or_none(TemplateVersion.id == row.id)
        if stored is None:
            raise TemplateNotFound(f"template {template_id!r} not found")
        return compile_template(stored.subject, stored.body_html, stored.body_text)

    return row.version, cache.get_or_compile(key, load)


def render_version(
    account_id: int, template_id: str, version: int, data: Mapping[str, Any] | None
) -> RenderedContent:
    """Render a stored version with the substitution data ``data``.

    Raises :class:`TemplateNotFound` and ``RenderError``.
    """
    return compiled_version(account_id, template_id, version)[1].render(data)


def preview(account_id: int, template_id: str, data: Mapping[str, Any] | None) -> RenderedContent:
    """Render the current version with ``data``. Raises :class:`TemplateNotFound` and
    ``RenderError``."""
    return compiled_version(account_id, template_id)[1].render(data)
