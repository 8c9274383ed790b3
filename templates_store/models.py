"""Tables of the template store.

The models are not bound to a database: the application binds them (``database.bind(MODELS)``)
and creates the tables in its migrations. Only portable field types are used, so the same
models work on SQLite and PostgreSQL. Timestamps are integer milliseconds since the epoch (UTC).
"""

from __future__ import annotations

import peewee


class BaseModel(peewee.Model):
    class Meta:
        database = None
        legacy_table_names = False


class Template(BaseModel):
    """A template of one account. ``template_id`` is the id the API shows, unique per account;
    ``account_id`` is the account's primary key (no foreign key: accounts live elsewhere)."""

    account_id = peewee.IntegerField(index=True)
    template_id = peewee.CharField(max_length=64)
    name = peewee.TextField()
    current_version = peewee.IntegerField()
    created_at = peewee.BigIntegerField()
    updated_at = peewee.BigIntegerField()

    class Meta:
        table_name = "template"
        indexes = ((("account_id", "template_id"), True),)


class TemplateVersion(BaseModel):
    """One saved version; never modified after it is written, removed with its template.

    ``source_html`` is the HTML as the client sent it (what the API returns); ``body_html`` is
    the CSS-inlined copy that is rendered and sent. ``shortcodes`` is a JSON array of strings.
    ``revision`` is random and unique: it tells apart two versions that share an id and a
    number because a template was deleted and created again, which keeps caches correct.
    """

    template = peewee.ForeignKeyField(Template, backref="versions", on_delete="CASCADE")
    version = peewee.IntegerField()
    revision = peewee.CharField(max_length=32, unique=True)
    name = peewee.TextField()
    subject = peewee.TextField(null=True)
    source_html = peewee.TextField(null=True)
    body_html = peewee.TextField(null=True)
    body_text = peewee.TextField(null=True)
    shortcodes = peewee.TextField()
    created_at = peewee.BigIntegerField()

    class Meta:
        table_name = "template_version"
        indexes = ((("template", "version"), True),)


MODELS = [Template, TemplateVersion]
