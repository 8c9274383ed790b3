"""Passkeys (WebAuthn Level 3) as a console user's second factor, with py_webauthn: the
ceremony options the browser is given, and the checks of what it answers (challenge, origin,
relying party id, signature, counter). The relying party is the host of ``LAYANG_PUBLIC_URL``,
so a passkey works only on the address people are given."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import webauthn
from webauthn.helpers import bytes_to_base64url
from webauthn.helpers.exceptions import InvalidAuthenticationResponse, InvalidRegistrationResponse
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from layang.clock import now_ms
from layang.config import Config
from layang.db import write_transaction
from layang.domain.errors import InvalidInput
from layang.models import ConsoleUser, Membership, Passkey
from layang.team import audit

MAX_CREDENTIAL_JSON = 64 * 1024


def _relying_party(config: Config) -> tuple[str, str]:
    parts = urlsplit(config.public_url)
    return parts.hostname or "localhost", f"{parts.scheme}://{parts.netloc}"


def user_passkeys(user: ConsoleUser | str) -> list[Passkey]:
    return list(Passkey.select().where(Passkey.user == user).order_by(Passkey.created_at))


def has_passkey(user: ConsoleUser | str) -> bool:
    return Passkey.select().where(Passkey.user == user).exists()


def registration_options(user: ConsoleUser, config: Config) -> tuple[str, bytes]:
    """The options of ``navigator.credentials.create`` as JSON, and their challenge (to keep
    until the answer comes)."""
    rp_id, _ = _relying_party(config)
    options = webauthn.generate_registration_options(
        rp_id=rp_id,
        rp_name="Layang",
        user_name=user.email,
        user_id=user.id.encode(),
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.PREFERRED,
        ),
        exclude_credentials=[
            PublicKeyCredentialDescriptor(id=webauthn.base64url_to_bytes(p.id))
            for p in user_passkeys(user)
        ],
    )
    return webauthn.options_to_json(options), options.challenge


def _credential(raw: str) -> str:
    if len(raw) > MAX_CREDENTIAL_JSON:
        raise InvalidInput("credential", "Too large.")
    try:
        json.loads(raw)
    except ValueError:
        raise InvalidInput("credential", "Not JSON.") from None
    return raw


def register(
    user: ConsoleUser, raw: str, challenge: bytes, label: str, config: Config, source: str
) -> Passkey:
    """Keep the passkey the browser made, once its answer checks out. Raises ``InvalidInput``
    on field ``credential``."""
    rp_id, origin = _relying_party(config)
    try:
        verified = webauthn.verify_registration_response(
            credential=_credential(raw),
            expected_challenge=challenge,
            expected_rp_id=rp_id,
            expected_origin=origin,
        )
    except InvalidRegistrationResponse as error:
        raise InvalidInput("credential", f"The passkey was not accepted: {error}") from None
    with write_transaction():
        passkey = Passkey.create(
            id=bytes_to_base64url(verified.credential_id),
            user=user,
            public_key=verified.credential_public_key,
            sign_count=verified.sign_count,
            label=(label or "Passkey")[:100],
            created_at=now_ms(),
        )
        for membership in Membership.select().where(Membership.user == user):
            audit.record(
                membership.account_id,
                audit.user_actor(user.email),
                "passkey.added",
                passkey.label,
                source=source,
            )
    return passkey


def authentication_options(user: ConsoleUser, config: Config) -> tuple[str, bytes]:
    """The options of ``navigator.credentials.get`` for the user's passkeys, as JSON, and
    their challenge."""
    rp_id, _ = _relying_party(config)
    options = webauthn.generate_authentication_options(
        rp_id=rp_id,
        allow_credentials=[
            PublicKeyCredentialDescriptor(id=webauthn.base64url_to_bytes(p.id))
            for p in user_passkeys(user)
        ],
        user_verification=UserVerificationRequirement.PREFERRED,
    )
    return webauthn.options_to_json(options), options.challenge


def authenticate(user: ConsoleUser, raw: str, challenge: bytes, config: Config) -> bool:
    """Whether the browser's answer is a signature of ``challenge`` by one of the user's
    passkeys, with a counter that went up (or an authenticator that keeps none)."""
    rp_id, origin = _relying_party(config)
    try:
        credential_id = json.loads(_credential(raw)).get("id", "")
    except (InvalidInput, AttributeError):
        return False
    passkey = Passkey.get_or_none((Passkey.id == str(credential_id)) & (Passkey.user == user))
    if passkey is None:
        return False
    try:
        verified = webauthn.verify_authentication_response(
            credential=raw,
            expected_challenge=challenge,
            expected_rp_id=rp_id,
            expected_origin=origin,
            credential_public_key=bytes(passkey.public_key),
            credential_current_sign_count=passkey.sign_count,
        )
    except (InvalidAuthenticationResponse, ValueError, KeyError, TypeError):
        return False
    Passkey.update(sign_count=verified.new_sign_count, used_at=now_ms()).where(
        Passkey.id == passkey.id
    ).execute()
    return True
