"""The schema's history: every change to the tables, in order, each stated in its own DDL.

A migration is frozen once released: it says exactly what it did on the day it was written and
never refers to the live models, so a database left at any version upgrades to the same schema
as a fresh one. To change the schema, append a function returning its statements (new tables,
``ALTER TABLE … ADD COLUMN``, indexes) and a ``Migration`` with the next version number to
``MIGRATIONS``, change the models to match, and let ``tests/test_migrations.py`` compare the two.

Statements are written once for both backends; the column types that differ come from the
``Dialect`` they are given. A statement containing a literal brace doubles it (f-string).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import peewee

from layang.clock import now_ms
from layang.db import database, is_postgresql, write_transaction

log = logging.getLogger("layang.migrations")


@dataclass(frozen=True)
class Dialect:
    """The column types that differ between SQLite and PostgreSQL, as peewee spells them."""

    autoincrement: str  # an integer primary key the database numbers itself
    bigint: str
    blob: str


SQLITE = Dialect(autoincrement="INTEGER", bigint="INTEGER", blob="BLOB")
POSTGRESQL = Dialect(autoincrement="SERIAL", bigint="BIGINT", blob="BYTEA")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: Callable[[Dialect], list[str]]


def _initial_schema(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "account" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "name" VARCHAR(64) NOT NULL,
            "mode" VARCHAR(16) NOT NULL,
            "created_at" {t.bigint} NOT NULL)""",
        'CREATE UNIQUE INDEX "account_name" ON "account" ("name")',
        f"""CREATE TABLE "api_key" (
            "id" VARCHAR(32) NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "label" VARCHAR(200) NOT NULL,
            "prefix" VARCHAR(16) NOT NULL,
            "secret_hash" VARCHAR(64) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "revoked_at" {t.bigint},
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "api_key_account_id" ON "api_key" ("account_id")',
        'CREATE UNIQUE INDEX "api_key_secret_hash" ON "api_key" ("secret_hash")',
        f"""CREATE TABLE "transmission" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "source" VARCHAR(8) NOT NULL,
            "mail_from" VARCHAR(320) NOT NULL,
            "from_header" TEXT NOT NULL,
            "subject" TEXT NOT NULL,
            "message_id" VARCHAR(400) NOT NULL,
            "metadata" TEXT NOT NULL,
            "payload" TEXT,
            "raw" {t.blob},
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "transmission_account_id" ON "transmission" ("account_id")',
        f"""CREATE TABLE "recipient" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "transmission_id" VARCHAR(26) NOT NULL,
            "account_id" INTEGER NOT NULL,
            "address" VARCHAR(320) NOT NULL,
            "recipient_type" VARCHAR(3) NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "updated_at" {t.bigint} NOT NULL,
            "attempts" INTEGER NOT NULL,
            "next_attempt_at" {t.bigint},
            "lease_owner" VARCHAR(64),
            "lease_expires_at" {t.bigint},
            FOREIGN KEY ("transmission_id") REFERENCES "transmission" ("id") ON DELETE CASCADE,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "recipient_transmission_id" ON "recipient" ("transmission_id")',
        'CREATE INDEX "recipient_next_attempt_at" ON "recipient" ("next_attempt_at")',
        'CREATE INDEX "recipient_account_id_id" ON "recipient" ("account_id", "id")',
        'CREATE INDEX "recipient_account_id_status_id" '
        'ON "recipient" ("account_id", "status", "id")',
        f"""CREATE TABLE "event" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "recipient_id" VARCHAR(26) NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "detail" TEXT NOT NULL,
            FOREIGN KEY ("recipient_id") REFERENCES "recipient" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "event_recipient_id" ON "event" ("recipient_id")',
    ]


def _authorized_recipients(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "authorized_recipient" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "email" VARCHAR(320) NOT NULL,
            "email_key" VARCHAR(320) NOT NULL,
            "name" VARCHAR(256),
            "status" VARCHAR(16) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "verified_at" {t.bigint},
            "token_hash" VARCHAR(64),
            "token_expires_at" {t.bigint},
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "authorized_recipient_account_id" ON "authorized_recipient" ("account_id")',
        'CREATE UNIQUE INDEX "authorized_recipient_token_hash" '
        'ON "authorized_recipient" ("token_hash")',
        'CREATE UNIQUE INDEX "authorized_recipient_account_id_email_key" '
        'ON "authorized_recipient" ("account_id", "email_key")',
    ]


def _templates(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "template" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "template_id" VARCHAR(64) NOT NULL,
            "name" TEXT NOT NULL,
            "current_version" INTEGER NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "updated_at" {t.bigint} NOT NULL)""",
        'CREATE INDEX "template_account_id" ON "template" ("account_id")',
        'CREATE UNIQUE INDEX "template_account_id_template_id" '
        'ON "template" ("account_id", "template_id")',
        f"""CREATE TABLE "template_version" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "template_id" INTEGER NOT NULL,
            "version" INTEGER NOT NULL,
            "revision" VARCHAR(32) NOT NULL,
            "name" TEXT NOT NULL,
            "subject" TEXT,
            "source_html" TEXT,
            "body_html" TEXT,
            "body_text" TEXT,
            "shortcodes" TEXT NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            FOREIGN KEY ("template_id") REFERENCES "template" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "template_version_template_id" ON "template_version" ("template_id")',
        'CREATE UNIQUE INDEX "template_version_revision" ON "template_version" ("revision")',
        'CREATE UNIQUE INDEX "template_version_template_id_version" '
        'ON "template_version" ("template_id", "version")',
    ]


def _sending_domains(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "sending_domain" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "domain" VARCHAR(253) NOT NULL,
            "return_path_domain" VARCHAR(253) NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "records" TEXT NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "checked_at" {t.bigint},
            "verified_at" {t.bigint},
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "sending_domain_account_id" ON "sending_domain" ("account_id")',
        'CREATE UNIQUE INDEX "sending_domain_domain" ON "sending_domain" ("domain")',
        f"""CREATE TABLE "dkim_key" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "sending_domain_id" INTEGER NOT NULL,
            "selector" VARCHAR(63) NOT NULL,
            "algorithm" VARCHAR(16) NOT NULL,
            "bits" INTEGER NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "public_key" TEXT NOT NULL,
            "private_key" {t.blob} NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "activated_at" {t.bigint},
            FOREIGN KEY ("sending_domain_id") REFERENCES "sending_domain" ("id")
                ON DELETE CASCADE)""",
        'CREATE INDEX "dkim_key_sending_domain_id" ON "dkim_key" ("sending_domain_id")',
        'CREATE UNIQUE INDEX "dkim_key_sending_domain_id_selector" '
        'ON "dkim_key" ("sending_domain_id", "selector")',
    ]


def _idempotency_rate_limits_scopes(t: Dialect) -> list[str]:
    return [
        """ALTER TABLE "api_key" ADD COLUMN "scope" VARCHAR(8) NOT NULL DEFAULT 'full'""",
        f"""CREATE TABLE "idempotency_key" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "key" VARCHAR(255) NOT NULL,
            "fingerprint" VARCHAR(64) NOT NULL,
            "token" VARCHAR(32) NOT NULL,
            "claimed_at" {t.bigint} NOT NULL,
            "expires_at" {t.bigint} NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "idempotency_key_account_id_key" '
        'ON "idempotency_key" ("account_id", "key")',
        'CREATE INDEX "idempotency_key_expires_at" ON "idempotency_key" ("expires_at")',
        f"""CREATE TABLE "idempotency_answer" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "key" VARCHAR(255) NOT NULL,
            "fingerprint" VARCHAR(64) NOT NULL,
            "status" INTEGER NOT NULL,
            "body" TEXT NOT NULL,
            "expires_at" {t.bigint} NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "idempotency_answer_account_id_key" '
        'ON "idempotency_answer" ("account_id", "key")',
        'CREATE INDEX "idempotency_answer_expires_at" ON "idempotency_answer" ("expires_at")',
        f"""CREATE TABLE "rate_window" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "starts_at" {t.bigint} NOT NULL,
            "ends_at" {t.bigint} NOT NULL,
            "count" INTEGER NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "rate_window_account_id_starts_at" '
        'ON "rate_window" ("account_id", "starts_at")',
        'CREATE INDEX "rate_window_ends_at" ON "rate_window" ("ends_at")',
    ]


def _inbound_messages(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "inbound_message" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "received_at" {t.bigint} NOT NULL,
            "mail_from" TEXT NOT NULL,
            "rcpt_to" TEXT NOT NULL,
            "size" INTEGER NOT NULL,
            "raw" {t.blob} NOT NULL,
            "reason" TEXT NOT NULL)""",
        'CREATE INDEX "inbound_message_received_at" ON "inbound_message" ("received_at")',
    ]


def _suppressions(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "suppression" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "email" VARCHAR(320) NOT NULL,
            "email_key" VARCHAR(320) NOT NULL,
            "reason" VARCHAR(16) NOT NULL,
            "transmission_id" VARCHAR(26),
            "detail" TEXT NOT NULL,
            "note" TEXT NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "suppression_account_id_email_key" '
        'ON "suppression" ("account_id", "email_key")',
        'CREATE INDEX "suppression_account_id_id" ON "suppression" ("account_id", "id")',
    ]


def _webhooks(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "webhook_endpoint" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "url" TEXT NOT NULL,
            "description" TEXT NOT NULL,
            "events" TEXT NOT NULL,
            "secret" {t.blob} NOT NULL,
            "previous_secret" {t.blob},
            "previous_secret_expires_at" {t.bigint},
            "created_at" {t.bigint} NOT NULL,
            "updated_at" {t.bigint} NOT NULL,
            "disabled_at" {t.bigint},
            "disabled_reason" TEXT,
            "failing_since" {t.bigint},
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "webhook_endpoint_account_id" ON "webhook_endpoint" ("account_id")',
        f"""CREATE TABLE "webhook_event" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "event_id" VARCHAR(32) NOT NULL,
            "endpoint_id" VARCHAR(26) NOT NULL,
            "recipient_id" VARCHAR(26),
            "status" VARCHAR(16) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "detail" TEXT NOT NULL,
            "delivery_id" VARCHAR(26),
            FOREIGN KEY ("endpoint_id") REFERENCES "webhook_endpoint" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "webhook_event_delivery_id_id" ON "webhook_event" ("delivery_id", "id")',
        'CREATE INDEX "webhook_event_endpoint_id_recipient_id" '
        'ON "webhook_event" ("endpoint_id", "recipient_id")',
        f"""CREATE TABLE "webhook_delivery" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "endpoint_id" VARCHAR(26) NOT NULL,
            "event_ids" TEXT NOT NULL,
            "body" TEXT NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "attempts" INTEGER NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "next_attempt_at" {t.bigint},
            "lease_owner" VARCHAR(64),
            "lease_expires_at" {t.bigint},
            FOREIGN KEY ("endpoint_id") REFERENCES "webhook_endpoint" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "webhook_delivery_endpoint_id" ON "webhook_delivery" ("endpoint_id")',
        'CREATE INDEX "webhook_delivery_next_attempt_at" ON "webhook_delivery" ("next_attempt_at")',
        f"""CREATE TABLE "webhook_attempt" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "delivery_id" VARCHAR(26) NOT NULL,
            "endpoint_id" VARCHAR(26) NOT NULL,
            "attempted_at" {t.bigint} NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "response_status" INTEGER,
            "error" TEXT,
            "next_attempt_at" {t.bigint},
            FOREIGN KEY ("delivery_id") REFERENCES "webhook_delivery" ("id") ON DELETE CASCADE,
            FOREIGN KEY ("endpoint_id") REFERENCES "webhook_endpoint" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "webhook_attempt_delivery_id" ON "webhook_attempt" ("delivery_id")',
        'CREATE INDEX "webhook_attempt_endpoint_id_id" ON "webhook_attempt" ("endpoint_id", "id")',
    ]


def _direct_to_mx(t: Dialect) -> list[str]:
    # The part after the last "@", lower-cased, in SQL both backends speak: rtrim() strips the
    # trailing characters that are not "@", leaving the local part and its "@".
    return [
        'ALTER TABLE "recipient" ADD COLUMN "domain" TEXT',
        'ALTER TABLE "recipient" ADD COLUMN "waiting_on" TEXT',
        'UPDATE "recipient" SET "domain" = lower(substr("address", '
        "length(rtrim(\"address\", replace(\"address\", '@', ''))) + 1))",
        'CREATE INDEX "recipient_domain_next_attempt_at" '
        'ON "recipient" ("domain", "next_attempt_at")',
        'CREATE INDEX "recipient_waiting_on" ON "recipient" ("waiting_on")',
        f"""CREATE TABLE "mx_domain" (
            "domain" VARCHAR(253) NOT NULL PRIMARY KEY,
            "site" TEXT NOT NULL,
            "expires_at" {t.bigint} NOT NULL)""",
        'CREATE INDEX "mx_domain_site" ON "mx_domain" ("site")',
        f"""CREATE TABLE "site_state" (
            "site" VARCHAR(1000) NOT NULL PRIMARY KEY,
            "connection_limit" INTEGER,
            "rule_limit" INTEGER,
            "state" VARCHAR(16) NOT NULL,
            "until_ms" {t.bigint},
            "reason" TEXT,
            "last_reply" TEXT,
            "pause_ms" {t.bigint} NOT NULL,
            "signal_at" {t.bigint},
            "failures" INTEGER NOT NULL,
            "rate_tat_us" {t.bigint},
            "updated_at" {t.bigint} NOT NULL)""",
        f"""CREATE TABLE "site_slot" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "site" VARCHAR(1000) NOT NULL,
            "owner" VARCHAR(64) NOT NULL,
            "expires_at" {t.bigint} NOT NULL)""",
        'CREATE INDEX "site_slot_site_expires_at" ON "site_slot" ("site", "expires_at")',
        'CREATE INDEX "site_slot_owner" ON "site_slot" ("owner")',
    ]


def _console_sessions(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "console_session" (
            "id" VARCHAR(64) NOT NULL PRIMARY KEY,
            "key_id" VARCHAR(32) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "expires_at" {t.bigint} NOT NULL,
            FOREIGN KEY ("key_id") REFERENCES "api_key" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "console_session_key_id" ON "console_session" ("key_id")',
        'CREATE INDEX "console_session_expires_at" ON "console_session" ("expires_at")',
    ]


def _transport_security(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "mta_sts_policy" (
            "domain" VARCHAR(255) NOT NULL PRIMARY KEY,
            "policy_id" VARCHAR(32) NOT NULL,
            "mode" VARCHAR(16) NOT NULL,
            "mx" TEXT NOT NULL,
            "max_age" INTEGER NOT NULL,
            "text" TEXT NOT NULL,
            "fetched_at" {t.bigint} NOT NULL,
            "expires_at" {t.bigint} NOT NULL)""",
        f"""CREATE TABLE "tls_session_result" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "row_key" VARCHAR(64) NOT NULL,
            "day" VARCHAR(10) NOT NULL,
            "policy_domain" VARCHAR(255) NOT NULL,
            "policy_type" VARCHAR(16) NOT NULL,
            "policy_strings" TEXT NOT NULL,
            "mx_host" VARCHAR(255) NOT NULL,
            "result_type" VARCHAR(40) NOT NULL,
            "detail" TEXT NOT NULL,
            "sessions" INTEGER NOT NULL,
            "updated_at" {t.bigint} NOT NULL)""",
        'CREATE UNIQUE INDEX "tls_session_result_row_key" ON "tls_session_result" ("row_key")',
        'CREATE INDEX "tls_session_result_day_policy_domain" '
        'ON "tls_session_result" ("day", "policy_domain")',
        f"""CREATE TABLE "tls_report" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "day" VARCHAR(10) NOT NULL,
            "policy_domain" VARCHAR(255) NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "report_id" VARCHAR(200) NOT NULL,
            "rua" TEXT NOT NULL,
            "detail" TEXT NOT NULL,
            "created_at" {t.bigint} NOT NULL)""",
        'CREATE UNIQUE INDEX "tls_report_day_policy_domain" '
        'ON "tls_report" ("day", "policy_domain")',
    ]


def _message_tls_requirement(t: Dialect) -> list[str]:
    return ['ALTER TABLE "transmission" ADD COLUMN "tls_requirement" VARCHAR(16)']


def _streams_and_breaker(t: Dialect) -> list[str]:
    return [
        """ALTER TABLE "transmission" ADD COLUMN "stream" VARCHAR(16) NOT NULL """
        """DEFAULT 'transactional'""",
        """ALTER TABLE "transmission" ADD COLUMN "from_domain" VARCHAR(253) NOT NULL DEFAULT ''""",
        'ALTER TABLE "recipient" ADD COLUMN "priority" INTEGER NOT NULL DEFAULT 0',
        'CREATE INDEX "recipient_priority_next_attempt_at" '
        'ON "recipient" ("priority", "next_attempt_at")',
        f"""CREATE TABLE "breaker_count" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "domain" VARCHAR(253) NOT NULL,
            "bucket" {t.bigint} NOT NULL,
            "sent" INTEGER NOT NULL,
            "hard_bounces" INTEGER NOT NULL,
            "complaints" INTEGER NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "breaker_count_account_id_domain_bucket" '
        'ON "breaker_count" ("account_id", "domain", "bucket")',
        f"""CREATE TABLE "breaker_state" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "domain" VARCHAR(253) NOT NULL,
            "level" INTEGER NOT NULL,
            "reason" TEXT NOT NULL,
            "changed_at" {t.bigint} NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "breaker_state_account_id_domain" '
        'ON "breaker_state" ("account_id", "domain")',
    ]


def _dmarc_reports(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "dmarc_report" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "domain" VARCHAR(253) NOT NULL,
            "org_name" TEXT NOT NULL,
            "report_id" VARCHAR(255) NOT NULL,
            "begins_at" {t.bigint} NOT NULL,
            "ends_at" {t.bigint} NOT NULL,
            "received_at" {t.bigint} NOT NULL)""",
        'CREATE INDEX "dmarc_report_domain" ON "dmarc_report" ("domain")',
        'CREATE UNIQUE INDEX "dmarc_report_org_name_report_id" '
        'ON "dmarc_report" ("org_name", "report_id")',
        f"""CREATE TABLE "dmarc_record" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "report_id" INTEGER NOT NULL,
            "domain" VARCHAR(253) NOT NULL,
            "begins_at" {t.bigint} NOT NULL,
            "source_ip" VARCHAR(45) NOT NULL,
            "count" INTEGER NOT NULL,
            "disposition" VARCHAR(16) NOT NULL,
            "dkim" VARCHAR(16) NOT NULL,
            "spf" VARCHAR(16) NOT NULL,
            "dkim_aligned" INTEGER NOT NULL,
            "spf_aligned" INTEGER NOT NULL,
            "header_from" VARCHAR(253) NOT NULL,
            "dkim_domains" TEXT NOT NULL,
            FOREIGN KEY ("report_id") REFERENCES "dmarc_report" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "dmarc_record_report_id" ON "dmarc_record" ("report_id")',
        'CREATE INDEX "dmarc_record_domain_begins_at" ON "dmarc_record" ("domain", "begins_at")',
    ]


# -- 18: the overview's counts ------------------------------------------------------------------
#
# Counted by the database itself as events are stored, whichever code stores them: one row per
# account, hour, sending domain (the From address's) and kind of event, so that the console's
# overview reads a few hundred rows instead of every event. A recipient stored as queued counts
# as sent ("Injection"); a Bounce counts under its class ("Bounce:hard"). SQLite counts row by
# row (it has one writer); PostgreSQL counts once per statement over the rows it inserted,
# grouped, in key order so that concurrent writers take the counters' locks in the same order.
# The mail already stored is counted once, after the triggers exist (their locks keep writers
# out meanwhile): recipients that were not suppressed on arrival as sent, and every event.

_HOUR_MS = 3600000


def _sqlite_domain(email: str) -> str:
    # What follows the last "@": strip the trailing run of characters that are not "@".
    return f"lower(substr({email}, length(rtrim({email}, replace({email}, '@', ''))) + 1))"


def _activity_counts_so_far(domain: str, hour: str, kind: str) -> list[str]:
    columns = '("account_id", "hour", "domain", "kind", "count")'
    return [
        f"""INSERT INTO "activity_count" {columns}
        SELECT r."account_id", {hour.format(at='r."created_at"')}, {domain}, 'Injection', count(*)
        FROM "recipient" r JOIN "transmission" t ON t."id" = r."transmission_id"
        WHERE r."status" <> 'Suppressed'
        GROUP BY 1, 2, 3""",  # noqa: S608 - fixed names only
        f"""INSERT INTO "activity_count" {columns}
        SELECT r."account_id", {hour.format(at='e."created_at"')}, {domain}, {kind}, count(*)
        FROM "event" e JOIN "recipient" r ON r."id" = e."recipient_id"
        JOIN "transmission" t ON t."id" = r."transmission_id"
        GROUP BY 1, 2, 3, 4""",  # noqa: S608 - fixed names only
    ]


def _activity_counts(t: Dialect) -> list[str]:
    table = f"""CREATE TABLE "activity_count" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "hour" {t.bigint} NOT NULL,
            "domain" VARCHAR(253) NOT NULL,
            "kind" VARCHAR(32) NOT NULL,
            "count" {t.bigint} NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)"""
    index = (
        'CREATE UNIQUE INDEX "activity_count_account_id_hour_domain_kind" '
        'ON "activity_count" ("account_id", "hour", "domain", "kind")'
    )
    key = '("account_id", "hour", "domain", "kind")'
    columns = '("account_id", "hour", "domain", "kind", "count")'
    if t is SQLITE:
        # Text that is not JSON (never written by Layang, but a database may hold anything)
        # counts under no domain or class rather than failing the write.
        email = (
            'json_extract(CASE WHEN json_valid(t."from_header") THEN t."from_header" END, '
            "'$.email')"
        )
        domain = f"coalesce({_sqlite_domain(email)}, '')"
        bounce_class = (
            'json_extract(CASE WHEN json_valid(NEW."detail") THEN NEW."detail" END, '
            "'$.bounceClass')"
        )
        return [
            table,
            index,
            f"""CREATE TRIGGER "activity_count_sent" AFTER INSERT ON "recipient"
            WHEN NEW."status" = 'Injection' BEGIN
              INSERT INTO "activity_count" {columns}
              SELECT NEW."account_id", NEW."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                     'Injection', 1
              FROM "transmission" t WHERE t."id" = NEW."transmission_id"
              ON CONFLICT {key} DO UPDATE SET "count" = "count" + 1;
            END""",  # noqa: S608 - fixed names only
            f"""CREATE TRIGGER "activity_count_event" AFTER INSERT ON "event" BEGIN
              INSERT INTO "activity_count" {columns}
              SELECT r."account_id", NEW."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                     CASE WHEN NEW."status" = 'Bounce'
                          THEN 'Bounce:' || coalesce({bounce_class}, 'undetermined')
                          ELSE NEW."status" END, 1
              FROM "recipient" r JOIN "transmission" t ON t."id" = r."transmission_id"
              WHERE r."id" = NEW."recipient_id"
              ON CONFLICT {key} DO UPDATE SET "count" = "count" + 1;
            END""",  # noqa: S608 - fixed names only
            *_activity_counts_so_far(
                domain,
                f"{{at}} / {_HOUR_MS} * {_HOUR_MS}",
                "CASE WHEN e.\"status\" = 'Bounce' THEN 'Bounce:' || "
                'coalesce(json_extract(CASE WHEN json_valid(e."detail") THEN e."detail" END, '
                "'$.bounceClass'), 'undetermined') "
                'ELSE e."status" END',
            ),
        ]
    domain = (
        "coalesce(lower(regexp_replace(CASE WHEN left(ltrim(t.\"from_header\"), 1) = '{' "
        "THEN t.\"from_header\"::json->>'email' END, '^.*@', '')), '')"
    )
    upsert = (
        f'ON CONFLICT {key} DO UPDATE SET "count" = "activity_count"."count" + EXCLUDED."count"'
    )
    return [
        table,
        index,
        f"""CREATE FUNCTION "activity_count_sent"() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO "activity_count" {columns}
          SELECT n."account_id", n."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                 'Injection', count(*)
          FROM "new_rows" n JOIN "transmission" t ON t."id" = n."transmission_id"
          WHERE n."status" = 'Injection'
          GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
          {upsert};
          RETURN NULL;
        END $$""",  # noqa: S608 - fixed names only
        'CREATE TRIGGER "activity_count_sent" AFTER INSERT ON "recipient" '
        'REFERENCING NEW TABLE AS "new_rows" FOR EACH STATEMENT '
        'EXECUTE FUNCTION "activity_count_sent"()',
        f"""CREATE FUNCTION "activity_count_event"() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO "activity_count" {columns}
          SELECT r."account_id", n."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                 CASE WHEN n."status" = 'Bounce'
                      THEN 'Bounce:' || coalesce(CASE WHEN left(ltrim(n."detail"), 1) = '{{'
                        THEN n."detail"::json->>'bounceClass' END, 'undetermined')
                      ELSE n."status" END,
                 count(*)
          FROM "new_rows" n JOIN "recipient" r ON r."id" = n."recipient_id"
          JOIN "transmission" t ON t."id" = r."transmission_id"
          GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
          {upsert};
          RETURN NULL;
        END $$""",  # noqa: S608 - fixed names only
        'CREATE TRIGGER "activity_count_event" AFTER INSERT ON "event" '
        'REFERENCING NEW TABLE AS "new_rows" FOR EACH STATEMENT '
        'EXECUTE FUNCTION "activity_count_event"()',
        *_activity_counts_so_far(
            domain,
            f"{{at}} / {_HOUR_MS} * {_HOUR_MS}",
            "CASE WHEN e.\"status\" = 'Bounce' THEN 'Bounce:' || "
            "coalesce(CASE WHEN left(ltrim(e.\"detail\"), 1) = '{' "
            "THEN e.\"detail\"::json->>'bounceClass' END, 'undetermined') ELSE e.\"status\" END",
        ),
    ]


# -- 21: the overview's counts by stream --------------------------------------------------------
#
# The counts of migration 18 gain the stream, so the overview can show it (contract 17). The
# triggers read it from the recipient's "priority" (0 transactional, 1 broadcast, written with
# the row from its transmission's stream), which each trigger already has at hand: the
# transmission's own "stream" column lies after "payload" and "raw" in its row, and SQLite reads
# through every overflow page of a large message to reach it (0.37 ms per insert for a 1 MB
# message, against 6 µs for the priority). The counts are then made again from the records, as
# the new triggers would have counted them: a recipient counts as sent unless it was stored
# Suppressed on arrival, its Suppressed event dated at its creation; one that a worker
# suppressed later was counted as sent when it was stored, and still is.

_COUNT_KEY = '("account_id", "hour", "domain", "stream", "kind")'
_COUNT_COLUMNS = '("account_id", "hour", "domain", "stream", "kind", "count")'


def _stream_of(priority: str) -> str:
    return f"CASE WHEN {priority} = 1 THEN 'broadcast' ELSE 'transactional' END"


def _counts_by_stream_so_far(domain: str, event_kind: str, upsert: str) -> list[str]:
    hour = f"/ {_HOUR_MS} * {_HOUR_MS}"
    return [
        'DELETE FROM "activity_count"',
        f"""INSERT INTO "activity_count" {_COUNT_COLUMNS}
        SELECT r."account_id", r."created_at" {hour}, {domain}, {_stream_of('r."priority"')},
               'Injection', count(*)
        FROM "recipient" r JOIN "transmission" t ON t."id" = r."transmission_id"
        WHERE r."status" <> 'Suppressed' OR NOT EXISTS (
          SELECT 1 FROM "event" e WHERE e."recipient_id" = r."id"
          AND e."status" = 'Suppressed' AND e."created_at" = r."created_at")
        GROUP BY 1, 2, 3, 4""",  # noqa: S608 - fixed names only
        # An event stored as "Injection" (Layang stores none) adds to the rows above rather
        # than fail the upgrade.
        f"""INSERT INTO "activity_count" {_COUNT_COLUMNS}
        SELECT r."account_id", e."created_at" {hour}, {domain}, {_stream_of('r."priority"')},
               {event_kind}, count(*)
        FROM "event" e JOIN "recipient" r ON r."id" = e."recipient_id"
        JOIN "transmission" t ON t."id" = r."transmission_id"
        WHERE true
        GROUP BY 1, 2, 3, 4, 5
        {upsert}""",  # noqa: S608 - fixed names only
    ]


def _activity_counts_by_stream(t: Dialect) -> list[str]:
    index = [
        'DROP INDEX "activity_count_account_id_hour_domain_kind"',
        """ALTER TABLE "activity_count" ADD COLUMN "stream" VARCHAR(16) NOT NULL """
        """DEFAULT 'transactional'""",
        'CREATE UNIQUE INDEX "activity_count_account_id_hour_domain_stream_kind" '
        f'ON "activity_count" {_COUNT_KEY}',
    ]
    if t is SQLITE:
        email = (
            'json_extract(CASE WHEN json_valid(t."from_header") THEN t."from_header" END, '
            "'$.email')"
        )
        domain = f"coalesce({_sqlite_domain(email)}, '')"

        def bounce_kind(event: str) -> str:
            bounce_class = (
                f'json_extract(CASE WHEN json_valid({event}."detail") THEN {event}."detail" END, '
                "'$.bounceClass')"
            )
            return (
                f"CASE WHEN {event}.\"status\" = 'Bounce' "
                f"THEN 'Bounce:' || coalesce({bounce_class}, 'undetermined') "
                f'ELSE {event}."status" END'
            )

        return [
            'DROP TRIGGER "activity_count_sent"',
            'DROP TRIGGER "activity_count_event"',
            *index,
            f"""CREATE TRIGGER "activity_count_sent" AFTER INSERT ON "recipient"
            WHEN NEW."status" = 'Injection' BEGIN
              INSERT INTO "activity_count" {_COUNT_COLUMNS}
              SELECT NEW."account_id", NEW."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                     {_stream_of('NEW."priority"')}, 'Injection', 1
              FROM "transmission" t WHERE t."id" = NEW."transmission_id"
              ON CONFLICT {_COUNT_KEY} DO UPDATE SET "count" = "count" + 1;
            END""",  # noqa: S608 - fixed names only
            f"""CREATE TRIGGER "activity_count_event" AFTER INSERT ON "event" BEGIN
              INSERT INTO "activity_count" {_COUNT_COLUMNS}
              SELECT r."account_id", NEW."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                     {_stream_of('r."priority"')}, {bounce_kind("NEW")}, 1
              FROM "recipient" r JOIN "transmission" t ON t."id" = r."transmission_id"
              WHERE r."id" = NEW."recipient_id"
              ON CONFLICT {_COUNT_KEY} DO UPDATE SET "count" = "count" + 1;
            END""",  # noqa: S608 - fixed names only
            *_counts_by_stream_so_far(
                domain,
                bounce_kind("e"),
                f'ON CONFLICT {_COUNT_KEY} DO UPDATE SET "count" = "count" + excluded."count"',
            ),
        ]
    domain = (
        "coalesce(lower(regexp_replace(CASE WHEN left(ltrim(t.\"from_header\"), 1) = '{' "
        "THEN t.\"from_header\"::json->>'email' END, '^.*@', '')), '')"
    )

    def bounce_kind(event: str) -> str:
        return (
            f"CASE WHEN {event}.\"status\" = 'Bounce' THEN 'Bounce:' || "
            f"coalesce(CASE WHEN left(ltrim({event}.\"detail\"), 1) = '{{' "
            f"THEN {event}.\"detail\"::json->>'bounceClass' END, 'undetermined') "
            f'ELSE {event}."status" END'
        )

    upsert = (
        f"ON CONFLICT {_COUNT_KEY} "
        'DO UPDATE SET "count" = "activity_count"."count" + EXCLUDED."count"'
    )
    return [
        # Writers wait until the counts are made again (readers go on): they take these tables
        # before "activity_count", and so does this. The triggers stay; their functions change.
        'LOCK TABLE "recipient", "event" IN SHARE ROW EXCLUSIVE MODE',
        *index,
        f"""CREATE OR REPLACE FUNCTION "activity_count_sent"() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO "activity_count" {_COUNT_COLUMNS}
          SELECT n."account_id", n."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                 {_stream_of('n."priority"')}, 'Injection', count(*)
          FROM "new_rows" n JOIN "transmission" t ON t."id" = n."transmission_id"
          WHERE n."status" = 'Injection'
          GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
          {upsert};
          RETURN NULL;
        END $$""",  # noqa: S608 - fixed names only
        f"""CREATE OR REPLACE FUNCTION "activity_count_event"() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO "activity_count" {_COUNT_COLUMNS}
          SELECT r."account_id", n."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                 {_stream_of('r."priority"')}, {bounce_kind("n")}, count(*)
          FROM "new_rows" n JOIN "recipient" r ON r."id" = n."recipient_id"
          JOIN "transmission" t ON t."id" = r."transmission_id"
          GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
          {upsert};
          RETURN NULL;
        END $$""",  # noqa: S608 - fixed names only
        *_counts_by_stream_so_far(domain, bounce_kind("e"), upsert),
    ]


def _domain_claims(t: Dialect) -> list[str]:
    # Pending claims of one domain may coexist across accounts; only one may be verified.
    return [
        'DROP INDEX "sending_domain_domain"',
        'CREATE UNIQUE INDEX "sending_domain_account_id_domain" '
        'ON "sending_domain" ("account_id", "domain")',
        'CREATE UNIQUE INDEX "sending_domain_verified_domain" '
        """ON "sending_domain" ("domain") WHERE ("status" = 'verified')""",
    ]


def _webhook_notifications(t: Dialect) -> list[str]:
    # An idle dispatcher LISTENs instead of polling (SQLite has nothing to notify: it polls).
    # One notification per statement that stored rows, whichever code path stored them.
    if t is not POSTGRESQL:
        return []
    return [
        """CREATE FUNCTION "webhook_notify"() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF EXISTS (SELECT 1 FROM "new_rows") THEN
            PERFORM pg_notify('layang_webhooks', '');
          END IF;
          RETURN NULL;
        END $$""",
        *(
            f'CREATE TRIGGER "{table}_notify" AFTER INSERT ON "{table}" '
            'REFERENCING NEW TABLE AS "new_rows" FOR EACH STATEMENT '
            'EXECUTE FUNCTION "webhook_notify"()'
            for table in ("webhook_event", "webhook_delivery")
        ),
    ]


def _payload_chunks(t: Dialect) -> list[str]:
    return [
        """CREATE TABLE "payload_chunk" (
            "transmission_id" VARCHAR(26) NOT NULL,
            "seq" INTEGER NOT NULL,
            "text" TEXT NOT NULL,
            PRIMARY KEY ("transmission_id", "seq"),
            FOREIGN KEY ("transmission_id") REFERENCES "transmission" ("id") ON DELETE CASCADE)""",
    ]


def _counts_by_key_lookups(t: Dialect) -> list[str]:
    # PostgreSQL planned the triggers' joins of "new_rows" (a transition table, of unknown size
    # to the planner) as hash joins over a scan of every recipient and transmission ever kept:
    # 5 ms per batch of 40 events at 5,000 records, growing with the table. Each row is now
    # looked up by its key (OFFSET 0 keeps the planner from turning the lookup into a join).
    if t is not POSTGRESQL:
        return []  # SQLite's triggers run per row and look up by key already
    domain = (
        "coalesce(lower(regexp_replace(CASE WHEN left(ltrim(t.\"from_header\"), 1) = '{' "
        "THEN t.\"from_header\"::json->>'email' END, '^.*@', '')), '')"
    )
    bounce_kind = (
        "CASE WHEN n.\"status\" = 'Bounce' THEN 'Bounce:' || "
        "coalesce(CASE WHEN left(ltrim(n.\"detail\"), 1) = '{' "
        "THEN n.\"detail\"::json->>'bounceClass' END, 'undetermined') "
        'ELSE n."status" END'
    )
    upsert = (
        f"ON CONFLICT {_COUNT_KEY} "
        'DO UPDATE SET "count" = "activity_count"."count" + EXCLUDED."count"'
    )
    transmission = (
        'CROSS JOIN LATERAL (SELECT "from_header" FROM "transmission" '
        '  WHERE "id" = {rows}."transmission_id" OFFSET 0) t'
    )
    return [
        f"""CREATE OR REPLACE FUNCTION "activity_count_sent"() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO "activity_count" {_COUNT_COLUMNS}
          SELECT n."account_id", n."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                 {_stream_of('n."priority"')}, 'Injection', count(*)
          FROM "new_rows" n {transmission.format(rows="n")}
          WHERE n."status" = 'Injection'
          GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
          {upsert};
          RETURN NULL;
        END $$""",  # noqa: S608 - fixed names only
        f"""CREATE OR REPLACE FUNCTION "activity_count_event"() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO "activity_count" {_COUNT_COLUMNS}
          SELECT r."account_id", n."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                 {_stream_of('r."priority"')}, {bounce_kind}, count(*)
          FROM "new_rows" n
          CROSS JOIN LATERAL (SELECT "account_id", "priority", "transmission_id"
            FROM "recipient" WHERE "id" = n."recipient_id" OFFSET 0) r
          {transmission.format(rows="r")}
          GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
          {upsert};
          RETURN NULL;
        END $$""",  # noqa: S608 - fixed names only
    ]


def _site_demand(t: Dialect) -> list[str]:
    # A process refused a site's slot marks it wanted, so the holders give back idle ones.
    return [
        f'ALTER TABLE "site_state" ADD COLUMN "wanted_at" {t.bigint}',
        'ALTER TABLE "site_state" ADD COLUMN "wanted_by" VARCHAR(64)',
    ]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _initial_schema),
    Migration(2, "sandbox authorized recipients", _authorized_recipients),
    Migration(3, "templates", _templates),
    Migration(4, "sending domains and DKIM keys", _sending_domains),
    Migration(5, "idempotency keys, rate limits, key scopes", _idempotency_rate_limits_scopes),
    Migration(6, "unrecognised inbound mail", _inbound_messages),
    Migration(7, "suppression list", _suppressions),
    Migration(8, "webhooks", _webhooks),
    Migration(10, "direct to MX: recipient domains, MX sites, site throttles", _direct_to_mx),
    Migration(11, "console sessions", _console_sessions),
    Migration(12, "pending domain claims coexist, one verified owner", _domain_claims),
    Migration(14, "streams and the circuit breaker", _streams_and_breaker),
    Migration(15, "DMARC aggregate reports", _dmarc_reports),
    Migration(16, "transport security: MTA-STS cache, TLS-RPT results", _transport_security),
    Migration(17, "REQUIRETLS and TLS-Required: No on messages", _message_tls_requirement),
    Migration(18, "the overview's counts", _activity_counts),
    Migration(19, "large messages' payloads stored in chunks", _payload_chunks),
    Migration(20, "idle webhook dispatchers are notified of new work", _webhook_notifications),
    Migration(21, "the overview's counts by stream", _activity_counts_by_stream),
    Migration(22, "the overview's counts look records up by key", _counts_by_key_lookups),
    Migration(23, "a site's slots are wanted by a waiting process", _site_demand),
)


class SchemaVersion(peewee.Model):
    """One row per applied migration."""

    version = peewee.IntegerField(primary_key=True)
    applied_at = peewee.BigIntegerField()

    class Meta:
        database = database
        table_name = "schema_version"


def _schema_version_table(t: Dialect) -> str:
    return (
        'CREATE TABLE IF NOT EXISTS "schema_version" '
        f'("version" INTEGER NOT NULL PRIMARY KEY, "applied_at" {t.bigint} NOT NULL)'
    )


def upgrade(migrations: Sequence[Migration] = MIGRATIONS) -> list[int]:
    """Apply every migration not yet recorded in ``schema_version``, each in its own transaction.

    Safe to run concurrently from several processes (each migration runs once) and idempotent;
    returns the versions this call applied. Raises the driver's error if the database cannot be
    reached, and whatever a failing statement raises (its migration is then rolled back).
    """
    dialect = POSTGRESQL if is_postgresql() else SQLITE
    database.connect(reuse_if_open=True)
    with write_transaction():
        # Concurrent CREATE TABLE IF NOT EXISTS can still collide on PostgreSQL's catalog, when
        # several processes start at once on an empty database.
        _lock_schema()
        database.execute_sql(_schema_version_table(dialect))
    applied = []
    for migration in sorted(migrations, key=lambda m: m.version):
        with write_transaction():
            _lock_schema()
            if SchemaVersion.get_or_none(SchemaVersion.version == migration.version):
                continue
            for statement in migration.statements(dialect):
                database.execute_sql(statement)
            SchemaVersion.create(version=migration.version, applied_at=now_ms())
        log.info("schema migration %d applied: %s", migration.version, migration.name)
        applied.append(migration.version)
    newest = max((m.version for m in migrations), default=0)
    log.info("schema up to date at version %d", newest)
    return applied


def _lock_schema() -> None:
    # Migrations wait for each other across processes; SQLite's IMMEDIATE transaction already
    # serialises them.
    if is_postgresql():
        database.execute_sql("SELECT pg_advisory_xact_lock(7411)")


# Database URLs whose schema this process, or the gunicorn master it was forked from, has
# already brought up to date.
_up_to_date: set[str] = set()


def upgrade_once(url: str) -> list[int]:
    """``upgrade()`` the database at ``url`` (already opened) unless this process already did.

    A forked child inherits the record, so the gunicorn workers of a master that upgraded (see
    ``layang.serving.processes``) only open the database. A process that finds the database
    unreachable records nothing and tries again on its next call. Raises as ``upgrade()`` does.
    """
    if url in _up_to_date:
        return []
    applied = upgrade()
    _up_to_date.add(url)
    return applied
