"""Migration 30: inbound routing, mail to an account's own domains handed to its endpoint."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "inbound routing: inbound domains, routes and the mail they received"


def statements(t: Dialect) -> list[str]:
    # A route that posts is delivered by the webhook outbox through an endpoint of its own
    # (``kind`` 'inbound'), so it gets the same signing, retries, fairness and address rules;
    # such endpoints are not listed among the account's webhooks.
    return [
        'ALTER TABLE "webhook_endpoint" ADD COLUMN "kind" VARCHAR(16) NOT NULL DEFAULT \'events\'',
        'CREATE TABLE "inbound_domain" ('
        f'"id" {t.autoincrement} NOT NULL PRIMARY KEY, '
        '"account_id" INTEGER NOT NULL REFERENCES "account" ("id") ON DELETE CASCADE, '
        '"domain" VARCHAR(253) NOT NULL, '
        '"status" VARCHAR(16) NOT NULL, '
        '"records" TEXT NOT NULL, '
        f'"created_at" {t.bigint} NOT NULL, '
        f'"checked_at" {t.bigint}, '
        f'"verified_at" {t.bigint})',
        'CREATE UNIQUE INDEX "inbound_domain_account_id_domain" '
        'ON "inbound_domain" ("account_id", "domain")',
        'CREATE INDEX "inbound_domain_account_id" ON "inbound_domain" ("account_id")',
        'CREATE UNIQUE INDEX "inbound_domain_verified_domain" ON "inbound_domain" ("domain") '
        "WHERE \"status\" = 'verified'",
        'CREATE TABLE "inbound_route" ('
        '"id" VARCHAR(26) NOT NULL PRIMARY KEY, '
        '"account_id" INTEGER NOT NULL REFERENCES "account" ("id") ON DELETE CASCADE, '
        '"domain_id" INTEGER NOT NULL REFERENCES "inbound_domain" ("id") ON DELETE CASCADE, '
        '"local_part" VARCHAR(64) NOT NULL, '
        '"action" VARCHAR(16) NOT NULL, '
        '"endpoint_id" VARCHAR(26) REFERENCES "webhook_endpoint" ("id") ON DELETE SET NULL, '
        '"spam_threshold" REAL, '
        f'"created_at" {t.bigint} NOT NULL)',
        'CREATE UNIQUE INDEX "inbound_route_domain_id_local_part" '
        'ON "inbound_route" ("domain_id", "local_part")',
        'CREATE INDEX "inbound_route_account_id" ON "inbound_route" ("account_id")',
        'CREATE INDEX "inbound_route_domain_id" ON "inbound_route" ("domain_id")',
        'CREATE INDEX "inbound_route_endpoint_id" ON "inbound_route" ("endpoint_id")',
        # One row per message and route; ``raw`` is the message as received, whole.
        'CREATE TABLE "inbound_email" ('
        '"id" VARCHAR(26) NOT NULL PRIMARY KEY, '
        '"account_id" INTEGER NOT NULL REFERENCES "account" ("id") ON DELETE CASCADE, '
        '"route_id" VARCHAR(26) REFERENCES "inbound_route" ("id") ON DELETE SET NULL, '
        '"route_match" VARCHAR(320) NOT NULL, '
        '"action" VARCHAR(16) NOT NULL, '
        f'"received_at" {t.bigint} NOT NULL, '
        '"mail_from" VARCHAR(512) NOT NULL, '
        '"rcpt_to" TEXT NOT NULL, '
        '"from_header" TEXT NOT NULL, '
        '"subject" TEXT NOT NULL, '
        '"size" INTEGER NOT NULL, '
        '"spam_score" REAL, '
        '"note" TEXT, '
        '"payload" TEXT NOT NULL, '
        f'"raw" {t.blob} NOT NULL, '
        '"delivery_id" VARCHAR(26), '
        '"deliveries" TEXT NOT NULL)',
        'CREATE INDEX "inbound_email_account_id_id" ON "inbound_email" ("account_id", "id")',
        'CREATE INDEX "inbound_email_received_at" ON "inbound_email" ("received_at")',
        'CREATE INDEX "inbound_email_account_id" ON "inbound_email" ("account_id")',
        'CREATE INDEX "inbound_email_route_id" ON "inbound_email" ("route_id")',
        # A route's deliveries go one at a time: a claim asks whether an older one is pending.
        'CREATE INDEX "webhook_delivery_pending_endpoint_id" ON "webhook_delivery" '
        '("endpoint_id", "id") WHERE "status" = \'pending\'',
    ]
