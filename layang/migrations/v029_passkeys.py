"""Migration 29: passkeys (WebAuthn credentials), a console user's second factor besides TOTP."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "passkeys: WebAuthn credentials of console users"


def statements(t: Dialect) -> list[str]:
    # ``id`` is the credential id (base64url, as the browser gives it); ``public_key`` the
    # COSE key the authenticator made; ``sign_count`` its counter, which only goes up.
    return [
        f"""CREATE TABLE "passkey" (
            "id" VARCHAR(1400) NOT NULL PRIMARY KEY,
            "user_id" VARCHAR(32) NOT NULL,
            "public_key" {t.blob} NOT NULL,
            "sign_count" {t.bigint} NOT NULL,
            "label" VARCHAR(100) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "used_at" {t.bigint},
            FOREIGN KEY ("user_id") REFERENCES "console_user" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "passkey_user_id" ON "passkey" ("user_id")',
    ]
