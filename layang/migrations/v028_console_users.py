"""Migration 28: console users, their memberships of accounts, their one-time links and
sessions, and the counters that slow down guessing at the sign-in form."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "console users, memberships, one-time links, user sessions and sign-in throttles"


def statements(t: Dialect) -> list[str]:
    # ``email_key`` is the lower-cased address, so one person is one row however they type it;
    # ``totp_seed`` is sealed (layang.sealing) and ``password_hash`` an argon2id PHC string.
    # ``totp_last_step`` is the time step of the last code accepted: a code works once. A
    # ``user_token`` row holds only the SHA-256 of its link's token.
    return [
        f"""CREATE TABLE "console_user" (
            "id" VARCHAR(32) NOT NULL PRIMARY KEY,
            "email" VARCHAR(320) NOT NULL,
            "email_key" VARCHAR(320) NOT NULL,
            "password_hash" VARCHAR(255),
            "totp_seed" {t.blob},
            "totp_last_step" {t.bigint},
            "failed_passwords" INTEGER NOT NULL DEFAULT 0,
            "locked_until" {t.bigint},
            "created_at" {t.bigint} NOT NULL,
            "password_changed_at" {t.bigint})""",
        'CREATE UNIQUE INDEX "console_user_email_key" ON "console_user" ("email_key")',
        f"""CREATE TABLE "membership" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "user_id" VARCHAR(32) NOT NULL,
            "account_id" INTEGER NOT NULL,
            "role" VARCHAR(16) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            FOREIGN KEY ("user_id") REFERENCES "console_user" ("id") ON DELETE CASCADE,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "membership_user_id_account_id" ON "membership" '
        '("user_id", "account_id")',
        'CREATE INDEX "membership_account_id" ON "membership" ("account_id")',
        f"""CREATE TABLE "user_token" (
            "id" VARCHAR(64) NOT NULL PRIMARY KEY,
            "purpose" VARCHAR(16) NOT NULL,
            "email" VARCHAR(320) NOT NULL,
            "user_id" VARCHAR(32),
            "account_id" INTEGER,
            "role" VARCHAR(16),
            "created_by" VARCHAR(320) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "expires_at" {t.bigint} NOT NULL,
            "used_at" {t.bigint},
            FOREIGN KEY ("user_id") REFERENCES "console_user" ("id") ON DELETE CASCADE,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "user_token_expires_at" ON "user_token" ("expires_at")',
        'CREATE INDEX "user_token_account_id" ON "user_token" ("account_id")',
        f"""CREATE TABLE "user_session" (
            "id" VARCHAR(64) NOT NULL PRIMARY KEY,
            "user_id" VARCHAR(32) NOT NULL,
            "account_id" INTEGER,
            "created_at" {t.bigint} NOT NULL,
            "seen_at" {t.bigint} NOT NULL,
            "expires_at" {t.bigint} NOT NULL,
            "source" VARCHAR(64) NOT NULL,
            "user_agent" VARCHAR(200) NOT NULL,
            FOREIGN KEY ("user_id") REFERENCES "console_user" ("id") ON DELETE CASCADE,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE SET NULL)""",
        'CREATE INDEX "user_session_user_id" ON "user_session" ("user_id")',
        'CREATE INDEX "user_session_expires_at" ON "user_session" ("expires_at")',
        f"""CREATE TABLE "sign_in_window" (
            "key" VARCHAR(400) NOT NULL,
            "starts_at" {t.bigint} NOT NULL,
            "ends_at" {t.bigint} NOT NULL,
            "count" INTEGER NOT NULL,
            PRIMARY KEY ("key", "starts_at"))""",
        'CREATE INDEX "sign_in_window_ends_at" ON "sign_in_window" ("ends_at")',
        f'ALTER TABLE "account" ADD COLUMN "two_factor_required_at" {t.bigint}',
    ]
