"""POST /v1/layang/transmissions: acceptance, validation, compatibility, errors."""

from __future__ import annotations

import functools
import json

import pytest

from layang.mail.message import OutgoingMessage
from layang.models import Recipient, Transmission
from tests.conftest import b64

URL = "/v1/layang/transmissions"


def message(**overrides):
    body = {
        "from": {"email": "shop@sender.test", "name": "Shop"},
        "subject": "Your order",
        "to": [{"email": "ana@rcpt.test", "name": "Ana"}],
        "bodyText": "Thanks for your order.",
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


def post(client, auth, body, **kwargs):
    return client.post(URL, json=body, headers=auth, **kwargs)


def assert_error(response, status, code, field=None):
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.is_json
    body = response.get_json()
    assert body["error"] == code
    assert body["status"] == status
    assert isinstance(body["message"], str) and body["message"]
    if field is not None:
        path = field.split(".")
        node = body["errors"]
        for part in path:
            assert part in node, f"{part!r} not in {node!r}"
            node = node[part]
        assert body["message"].startswith(field), body["message"]
    return body


def test_accepts_and_stores_durably(client, auth):
    response = post(client, auth, message())
    assert response.status_code == 200
    transmission_id = response.get_json()["transmissionId"]
    stored = Transmission.get_by_id(transmission_id)
    assert stored.subject == "Your order"
    (recipient,) = Recipient.select().where(Recipient.transmission == transmission_id)
    assert (recipient.address, recipient.recipient_type, recipient.status) == (
        "ana@rcpt.test",
        "to",
        "Injection",
    )


@pytest.mark.parametrize(
    "extra",
    [
        {"bodyText": None, "bodyHtml": "<html><body><p>Hi</p></body></html>"},
        {
            "bodyHtml": "<p>Hi</p>",
            "attachments": [{"mimeType": "text/plain", "filename": "a.txt", "value": b64(b"x")}],
        },
        {
            "optionsAttributes": {
                "openTracking": False,
                "clickTracking": False,
                "transactional": True,
            }
        },
        {"headers": [{"name": "X-Order", "value": "42"}]},
        {"cc": [{"email": "c1@rcpt.test"}, {"email": "c2@rcpt.test"}]},
        {"bcc": [{"email": "b1@rcpt.test"}, {"email": "b2@rcpt.test"}]},
        {"replyTo": [{"email": "help@sender.test"}], "metadata": {"order": "42"}},
    ],
)
def test_accepted_combinations(client, auth, extra):
    assert post(client, auth, message(**extra)).status_code == 200


def test_empty_values_mean_absent(client, auth):
    body = message(
        templateId="",
        bodyHtml="",
        cc=[],
        bcc=[],
        replyTo=[],
        headers=[],
        attachments=[],
        metadata={},
        substitutionData={},
        optionsAttributes={},
        **{"from": {"email": "shop@sender.test", "name": ""}},
    )
    response = post(client, auth, body)
    assert response.status_code == 200, response.get_json()


def test_attachment_alias(client, auth):
    body = message(
        attachment=[{"mimeType": "text/plain", "filename": "a.txt", "value": b64(b"hello")}]
    )
    response = post(client, auth, body)
    assert response.status_code == 200
    stored = Transmission.get_by_id(response.get_json()["transmissionId"]).payload
    assert OutgoingMessage.from_payload(json.loads(stored)).attachments[0].filename == "a.txt"


def stored_metadata(response):
    assert response.status_code == 200, response.get_json()
    return json.loads(Transmission.get_by_id(response.get_json()["transmissionId"]).metadata)


def test_metadata_is_kept_verbatim(client, auth):
    metadata = {"note": "", "empty": {}, "none": None, "n": 0, "list": ["", [], {"k": ""}]}
    assert stored_metadata(post(client, auth, message(metadata=metadata))) == metadata
    deepest = functools.reduce(lambda inner, _: [inner], range(31), 1)  # 32 levels in all
    assert stored_metadata(post(client, auth, message(metadata={"k": deepest})))["k"] == deepest
    exactly = {"k": "x" * (10 * 1024 - len('{"k":""}'))}
    assert stored_metadata(post(client, auth, message(metadata=exactly))) == exactly
    wide = {"k": "é" * 5200}  # counted in UTF-8 bytes, not characters
    assert_error(post(client, auth, message(metadata=wide)), 400, "validation_failed", "metadata")


@pytest.mark.parametrize("depth", [900, 50_000])
def test_metadata_nested_past_any_stack_is_a_clean_400(client, auth, depth):
    nested = "[" * depth + "]" * depth
    body = json.dumps(message(metadata={"k": 1})).replace("1}", nested + "}", 1)
    response = client.post(URL, data=body, content_type="application/json", headers=auth)
    if depth < 1000:  # within what the JSON parser reads: the field is named
        assert_error(response, 400, "validation_failed", "metadata")
    else:
        assert_error(response, 400, "malformed_json")
    assert Transmission.select().count() == 0


@pytest.mark.parametrize("depth", [33, 900, 5_000])
def test_substitution_data_nested_too_deep_is_a_400_naming_it(client, auth, depth):
    nested = '{"a":' * depth + "1" + "}" * depth
    body = json.dumps(message(templateId="t", substitutionData={"k": 1}))
    body = body.replace('{"k": 1}', nested)
    response = client.post(URL, data=body, content_type="application/json", headers=auth)
    assert len(response.get_data()) < 500
    if depth > 900:  # deeper than the JSON parser reads: the body as a whole is refused
        error = assert_error(response, 400, "malformed_json")
        assert "32 levels" in error["message"]
        return
    error = assert_error(response, 400, "validation_failed", "substitutionData")
    assert error["message"] == "substitutionData: Nested more than 32 levels deep."
    # Any other member too, even one the schema does not know.
    body = json.dumps(message(cc=[{"email": "x@rcpt.test"}])).replace('"x@rcpt.test"', nested)
    response = client.post(URL, data=body, content_type="application/json", headers=auth)
    assert_error(response, 400, "validation_failed", "cc")
    assert Transmission.select().count() == 0


def test_substitution_data_32_levels_deep_is_accepted(client, auth):
    create_template(client, auth, id="deep", name="Deep", subject="Hi", bodyText="{{a.a.a}}")
    nested = {"a": "end"}
    for _ in range(31):
        nested = {"a": nested}
    response = post(client, auth, message(templateId="deep", substitutionData=nested))
    assert response.status_code == 200, response.get_json()


def test_attachments_and_headers_are_capped(client, auth):
    file = {"filename": "a.txt", "mimeType": "text/plain", "value": b64(b"x")}
    header = {"name": "X-Tag", "value": "v"}
    assert post(client, auth, message(attachments=[file] * 100)).status_code == 200
    assert post(client, auth, message(headers=[header] * 100)).status_code == 200
    error = assert_error(
        post(client, auth, message(attachments=[file] * 101)),
        400,
        "validation_failed",
        "attachments",
    )
    assert error["message"] == "attachments: At most 100 files."
    error = assert_error(
        post(client, auth, message(headers=[header] * 20_000)), 400, "validation_failed", "headers"
    )
    assert error["message"] == "headers: At most 100 headers."
    assert Transmission.select().count() == 2


def create_template(client, auth, **template):
    response = client.post("/v1/layang/templates", json=template, headers=auth)
    assert response.status_code == 201, response.get_json()


def stored_message(response):
    assert response.status_code == 200, response.get_json()
    payload = Transmission.get_by_id(response.get_json()["transmissionId"]).payload
    return OutgoingMessage.from_payload(json.loads(payload))


def test_template_parts_first_request_body_only_for_a_missing_part(client, auth):
    create_template(client, auth, id="html", name="H", subject="S {{n}}", bodyHtml="<p>{{n}}</p>")
    body = message(templateId="html", substitutionData={"n": "1"}, subject=None)
    sent = stored_message(post(client, auth, {**body, "bodyHtml": "<p>mine</p>"}))
    assert (sent.subject, sent.text, sent.html) == ("S 1", "Thanks for your order.", "<p>1</p>")
    create_template(client, auth, id="text", name="T", bodyText="T {{n}}")
    sent = stored_message(post(client, auth, {**body, "templateId": "text", "subject": "{{n}}!"}))
    assert (sent.subject, sent.text, sent.html) == ("1!", "T 1", None)


def test_request_subject_with_a_template_is_checked(client, auth):
    create_template(client, auth, id="t", name="T", subject="S", bodyText="x")
    body = message(templateId="t", subject="Hi {{ name")
    assert_error(post(client, auth, body), 400, "validation_failed", "subject")
    body = message(templateId="t", subject="{{ missing }}")
    assert_error(post(client, auth, body), 400, "validation_failed", "subject")
    # Rendered in the same sandbox as templates: Python internals stay out of reach.
    body = message(templateId="t", subject="x{{ n.__class__ }}", substitutionData={"n": 1})
    assert stored_message(post(client, auth, body)).subject == "x"
    assert Transmission.select().count() == 1


def test_attachment_content_id_and_disposition(client, auth):
    png = {"filename": "a.png", "value": b64(b"x")}
    attachments = [
        {**png, "contentId": "<logo@shop>"},
        {**png, "contentId": "logo2", "disposition": "attachment"},
        {**png, "disposition": "inline"},
        {**png, "contentId": "", "disposition": ""},
    ]
    sent = stored_message(post(client, auth, message(attachments=attachments)))
    assert [(a.content_id, a.disposition) for a in sent.attachments] == [
        ("logo@shop", "inline"),
        ("logo2", "attachment"),
        (None, "inline"),
        (None, "attachment"),
    ]


def test_duplicate_recipients_get_one_email(client, auth):
    body = message(cc=[{"email": "ANA@rcpt.test"}], bcc=[{"email": "ana@RCPT.test"}])
    transmission_id = post(client, auth, body).get_json()["transmissionId"]
    assert Recipient.select().where(Recipient.transmission == transmission_id).count() == 1


def test_international_domain_is_accepted(client, auth):
    response = post(client, auth, message(to=[{"email": "jose@☃.example"}]))
    assert_error(response, 400, "validation_failed", "to.0.email")
    # A non-ASCII local part is taken as given (RFC 6531): it goes out over SMTPUTF8.
    response = post(client, auth, message(to=[{"email": "josé@bücher.example"}]))
    assert response.status_code == 200
    (recipient,) = Recipient.select()
    assert recipient.address == "josé@xn--bcher-kva.example"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"to": [{"email": "not-an-address"}]}, "to.0.email"),
        ({"to": None}, "to"),
        ({"from": None}, "from"),
        ({"from": {"name": "No address"}}, "from.email"),
        ({"subject": None}, "subject"),
        ({"subject": 42}, "subject"),
        ({"subject": "Hi\r\nBcc: victim@evil.test"}, "subject"),
        ({"from": {"email": "a@b.test", "name": "x\r\nBcc: victim@evil.test"}}, "from.name"),
        ({"bodyText": None}, "bodyText"),
        ({"templateId": "x" * 65}, "templateId"),
        ({"cc": [{"email": "ok@rcpt.test"}, {"email": "bad@"}]}, "cc.1.email"),
        ({"bcc": 42}, "bcc"),  # one address needs no list, but it must be an address
        ({"unknownField": 1}, "unknownField"),
        ({"optionsAttributes": {"openTracking": "sometimes"}}, "optionsAttributes.openTracking"),
        ({"optionsAttributes": {"bogus": True}}, "optionsAttributes.bogus"),
        ({"headers": [{"name": "Bcc", "value": "victim@evil.test"}]}, "headers.0.name"),
        ({"headers": [{"name": "content-type", "value": "text/plain"}]}, "headers.0.name"),
        ({"headers": [{"name": "Resent-Bcc", "value": "victim@evil.test"}]}, "headers.0.name"),
        ({"headers": [{"name": "X-Layang-Stream", "value": "broadcast"}]}, "headers.0.name"),
        ({"headers": [{"name": "Idempotency-Key", "value": "k1"}]}, "headers.0.name"),
        ({"headers": [{"name": "X-A", "value": "1\r\nBcc: victim@evil.test"}]}, "headers.0.value"),
        ({"headers": [{"name": "X A", "value": "1"}]}, "headers.0.name"),
        ({"headers": [{"name": "X-B:", "value": "1"}]}, "headers.0.name"),
        ({"headers": [{"name": "Reply-To", "value": "<<not an address"}]}, "headers.0.value"),
        ({"metadata": "order 42"}, "metadata"),
        ({"metadata": [{"a": 1}, "b"]}, "metadata"),
        ({"metadata": {"k": "x" * 10_241}}, "metadata"),
        ({"metadata": {"k": functools.reduce(lambda inner, _: [inner], range(32), 1)}}, "metadata"),
        (
            {"attachments": [{"filename": "a.png", "value": b64(b"x"), "contentId": "a b"}]},
            "attachments.0.contentId",
        ),
        (
            {"attachments": [{"filename": "a.png", "value": b64(b"x"), "disposition": "hidden"}]},
            "attachments.0.disposition",
        ),
        ({"attachments": [{"filename": "a.txt", "value": "***"}]}, "attachments.0.value"),
        (
            {"attachments": [{"filename": "../etc/passwd", "value": b64(b"x")}]},
            "attachments.0.filename",
        ),
        ({"attachments": [{"filename": "a\nb", "value": b64(b"x")}]}, "attachments.0.filename"),
        (
            {"attachments": [{"filename": "a.bin", "value": b64(b"x"), "mimeType": "nope"}]},
            "attachments.0.mimeType",
        ),
        ({"substitutionData": {"a": "b"}}, "substitutionData"),
    ],
)
def test_validation_names_the_field(client, auth, change, field):
    body = message()
    for key, value in change.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    assert_error(post(client, auth, body), 400, "validation_failed", field)
    assert Transmission.select().count() == 0


def test_header_injection_through_every_field_is_impossible(client, auth):
    for body in (
        message(to=[{"email": "ana@rcpt.test\r\nBcc: x@evil.test"}]),
        message(replyTo=[{"email": "a@b.test", "name": "A\nB"}]),
        message(headers=[{"name": "X-Ok", "value": "a\rb"}]),
    ):
        assert post(client, auth, body).status_code == 400
    assert Transmission.select().count() == 0


def test_unknown_template_is_404(client, auth):
    body = message(bodyText=None, templateId="nope", substitutionData={"a": "1"})
    assert_error(post(client, auth, body), 404, "template_not_found")


def test_malformed_json(client, auth):
    response = client.post(
        URL, data=b'{"from": ', headers={**auth, "Content-Type": "application/json"}
    )
    assert_error(response, 400, "malformed_json")


def test_body_must_be_an_object(client, auth):
    assert_error(post(client, auth, ["not", "an", "object"]), 400, "validation_failed")


def test_not_json_is_415(client, auth):
    response = client.post(
        URL, data="from=a", headers={**auth, "Content-Type": "application/x-www-form-urlencoded"}
    )
    assert_error(response, 415, "unsupported_media_type")


def test_too_large_is_413(client, auth, app):
    limit = app.config["LAYANG"].max_message_bytes
    body = message(bodyText="x" * (limit + 1))
    assert_error(post(client, auth, body), 413, "payload_too_large")
    assert Transmission.select().count() == 0
    huge = b"{" + b" " * (app.config["MAX_CONTENT_LENGTH"] + 10) + b"}"
    response = client.post(URL, data=huge, headers={**auth, "Content-Type": "application/json"})
    error = assert_error(response, 413, "payload_too_large")
    assert str(app.config["MAX_CONTENT_LENGTH"]) in error["message"]
    assert f"LAYANG_MAX_MESSAGE_BYTES={limit}" in error["message"]


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "Bearer lyg_nope",
        "Bearer lyg_" + "A" * 43,
        "Token lyg_x",
    ],
)
def test_auth_failures(client, header):
    headers = {"Authorization": header} if header is not None else {}
    response = client.post(URL, json=message(), headers=headers)
    assert_error(response, 401, "unauthorized")
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_revoked_key_fails_at_once(client, account):
    from layang.domain.accounts import create_api_key, revoke_api_key

    key, secret = create_api_key(account)
    headers = {"Authorization": f"Bearer {secret}"}
    assert client.post(URL, json=message(), headers=headers).status_code == 200
    revoke_api_key(key.id)
    assert_error(client.post(URL, json=message(), headers=headers), 401, "unauthorized")


def test_keys_are_stored_hashed(api_key):
    from layang.models import ApiKey

    (stored,) = ApiKey.select()
    assert api_key not in (stored.secret_hash, stored.prefix, stored.id)
    assert len(api_key) >= 4 + 43  # lyg_ + 256 bits in URL-safe Base64


def test_error_shape_for_404_405_and_unknown_paths(client, auth):
    assert_error(client.get("/v1/layang/nowhere", headers=auth), 404, "not_found")
    assert_error(client.get("/nowhere"), 404, "not_found")
    response = client.delete(URL, headers=auth)
    assert_error(response, 405, "method_not_allowed")
    assert "POST" in response.headers["Allow"]


def test_everything_but_the_pages_keeps_the_error_body(client, auth):
    # Unknown paths, even ones that look like a page's, and the operations paths.
    for path in ("/nothing-here", "/consolex", "/console-not", "/consentx", "/t/x/y", "/v1/nope"):
        assert_error(client.get(path, headers=auth), 404, "not_found")
    for path in ("/healthz", "/openapi.json", "/metrics"):
        response = client.post(path)
        assert_error(response, 405, "method_not_allowed")
        assert "GET" in response.headers["Allow"]
    response = client.get("/v1/layang/templates/nowhere", headers=auth)
    assert_error(response, 404, "not_found")


def test_internal_error_has_the_shape_and_no_trace(config):
    from layang.serving.app import create_app

    app = create_app(config)

    @app.get("/boom")
    def boom():
        raise RuntimeError("secret internals")

    response = app.test_client().get("/boom")
    body = assert_error(response, 500, "internal_error")
    assert "secret internals" not in json.dumps(body)
    assert "Traceback" not in response.get_data(as_text=True)


def test_addresses_may_be_strings_as_in_the_sdk(client, auth, upstream, relay_to):
    from tests.conftest import drain

    response = post(
        client,
        auth,
        message(
            **{"from": "Shop <shop@sender.test>"},
            to=["Ana <ana@rcpt.test>", {"email": "bo@rcpt.test"}],
            cc=["cy@rcpt.test"],
            replyTo=["help@sender.test"],
        ),
    )
    assert response.status_code == 200, response.get_json()
    drain(relay_to(upstream))
    # One copy per recipient, each with its own return path.
    assert sorted(r for copy in upstream.received for r in copy.rcpt_tos) == [
        "ana@rcpt.test",
        "bo@rcpt.test",
        "cy@rcpt.test",
    ]
    received = upstream.received[0]
    assert received.mail_from.startswith("b+")
    assert received.message["From"] == "Shop <shop@sender.test>"
    assert received.message["To"] == "Ana <ana@rcpt.test>, bo@rcpt.test"
    assert received.message["Reply-To"] == "help@sender.test"
    bad = post(client, auth, message(**{"from": "Shop <nowhere>"}))
    assert_error(bad, 400, "validation_failed")
    assert bad.get_json()["message"] == "from.email: Not a valid email address."


def test_one_address_needs_no_list(client, auth, upstream, relay_to):
    from tests.conftest import drain

    response = post(
        client,
        auth,
        message(to="Ana <ana@rcpt.test>", cc={"email": "cy@rcpt.test"}, bcc="dee@rcpt.test"),
    )
    assert response.status_code == 200, response.get_json()
    drain(relay_to(upstream))
    assert sorted(r for copy in upstream.received for r in copy.rcpt_tos) == [
        "ana@rcpt.test",
        "cy@rcpt.test",
        "dee@rcpt.test",
    ]
    assert upstream.received[0].message["To"] == "Ana <ana@rcpt.test>"
    bad = post(client, auth, message(to="nowhere"))
    assert_error(bad, 400, "validation_failed")
    assert bad.get_json()["message"] == "to.0.email: Not a valid email address."
