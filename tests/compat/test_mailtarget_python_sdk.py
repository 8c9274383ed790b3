"""Mailtarget's published Python SDK (``mailtarget-sdk`` 1.1, installed as a test dependency),
unchanged, against a live Layang: every way it sends, and the bytes that reach the upstream.

Its send paths are ``Layang(api_key).send(message)``, ``MailtargetClient(api_key).send(message)``
and ``MailtargetClient(...).layang.send(message)``; all post ``Message.to_dict()``, which always
carries every field, unused ones as ``""``, ``[]`` or ``{}`` (``templateId: ""``, attachments'
``contentId: ""`` and ``disposition: ""``), and ``Message.is_valid()`` refuses a message without
a body, so a template send always carries a fallback body too.
"""

from __future__ import annotations

import base64
import json

import pytest
from mailtarget_sdk import (
    Address,
    Attachment,
    Header,
    Layang,
    MailtargetAPIError,
    Message,
    OptionsAttributes,
)

from tests.compat.conftest import PNG, cid_targets, parsed, received_by, structure, text_of
from tests.conftest import drain

PDF = b"%PDF-1.4\n" + bytes(range(256)) + b"\n%%EOF\n"
SHOP = Address(email="shop@shop.example", name="The Shop")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_every_send_path_delivers(live_server, api_key, mailtarget, upstream, relay_to):
    standalone = Layang(api_key)
    standalone.APIBase = live_server
    paths = {
        "layang": standalone.send,
        "client": mailtarget.send,
        "client-layang": mailtarget.layang.send,
    }
    answers = {}
    for name, send in paths.items():
        message = Message(
            subject=f"Via {name}",
            from_address=Address(email="shop@shop.example"),  # name defaults to ""
            to=[Address(email=f"{name}@rcpt.example", name="Ana")],
            body_html="<p>Hello!</p>",
        )
        answers[name] = send(message)
    drain(relay_to(upstream))

    for name, answer in answers.items():
        assert set(answer) == {"transmissionId"}
        message = parsed(received_by(upstream, f"{name}@rcpt.example"))
        assert message["Subject"] == f"Via {name}"
        assert message["From"] == "shop@shop.example"
        assert message["To"] == f"Ana <{name}@rcpt.example>"
        # The "" bodyText is no body: the text part is made from the HTML.
        assert structure(message) == ["multipart/alternative", "  text/plain", "  text/html"]
        assert "<p>Hello!</p>" in text_of(message, "html")


def test_every_field_and_setter(mailtarget, layang, upstream, relay_to):
    message = Message(
        subject="Your invoice",
        from_address=SHOP,
        to=[Address(email="ana@rcpt.example", name="Ana")],
        body_text="Invoice attached.",
        body_html='<p>Invoice attached. <a href="https://shop.example/orders/42">Order</a></p>',
    )
    message.set_reply_to([Address(email="help@shop.example", name="Help")])
    message.set_cc([Address(email="cy@rcpt.example")])
    message.set_bcc([Address(email="dee@rcpt.example")])
    message.set_headers([Header(name="X-Order", value="A-42")])
    message.set_attachment([Attachment(filename="invoice.pdf", value=b64(PDF))])
    message.set_metadata({"orderId": 42, "vip": True, "items": [{"sku": "x", "qty": 2}]})
    message.set_options_attributes(
        OptionsAttributes(click_tracking=False, open_tracking=True, transactional=True)
    )
    transmission_id = mailtarget.send(message)["transmissionId"]
    drain(relay_to(upstream))

    received = received_by(upstream, "ana@rcpt.example")
    assert sorted(received.rcpt_tos) == ["ana@rcpt.example"]  # tracked: one copy each
    assert b"dee@rcpt.example" not in received.data
    mail = parsed(received)
    assert mail["From"] == "The Shop <shop@shop.example>"
    assert mail["Cc"] == "cy@rcpt.example"
    assert mail["Reply-To"] == "Help <help@shop.example>"
    assert mail["X-Order"] == "A-42"
    assert structure(mail) == [
        "multipart/mixed",
        "  multipart/alternative",
        "    text/plain",
        "    text/html",
        "  application/pdf",
    ]
    (attachment,) = mail.iter_attachments()
    assert attachment.get_filename() == "invoice.pdf"
    assert attachment.get_payload(decode=True) == PDF
    html = text_of(mail, "html")
    assert 'href="https://shop.example/orders/42"' in html  # click tracking off
    assert html.count('background-image:url(http://127.0.0.1:8000/') == 1  # the open pixel
    recipients = {r["recipient"] for r in layang.transmissions.get(transmission_id)["recipients"]}
    assert recipients == {"ana@rcpt.example", "cy@rcpt.example", "dee@rcpt.example"}
    for record in layang.activity.list(transmission_id=transmission_id):
        assert record["metadata"] == {
            "orderId": 42,
            "vip": True,
            "items": [{"sku": "x", "qty": 2}],
        }


def test_inline_images(mailtarget, upstream, relay_to):
    html = '<p><img src="cid:logo@shop.example" alt="Shop"> <img src="cid:stamp"></p>'
    message = Message(
        subject="With pictures",
        from_address=SHOP,
        to=[Address(email="ana@rcpt.example")],
        body_text="Our logo.",
        body_html=html,
        attachment=[
            Attachment(
                mime_type="image/png",
                filename="logo.png",
                value=b64(PNG),
                contentId="logo@shop.example",
                disposition="inline",
            ),
            # A bracketed Content-ID and no disposition: still an inline image.
            Attachment(filename="stamp.png", value=b64(PNG[::-1]), contentId="<stamp>"),
            Attachment(filename="invoice.pdf", value=b64(PDF)),
        ],
        options_attributes=OptionsAttributes(open_tracking=False),
    )
    mailtarget.send(message)
    drain(relay_to(upstream))

    mail = parsed(received_by(upstream, "ana@rcpt.example"))
    assert structure(mail) == [
        "multipart/mixed",
        "  multipart/alternative",
        "    text/plain",
        "    multipart/related",
        "      text/html",
        "      image/png",
        "      image/png",
        "  application/pdf",
    ]
    assert cid_targets(mail) == {"logo@shop.example": PNG, "stamp": PNG[::-1]}
    related = mail.get_payload(0).get_payload(1)
    assert related.get_param("type") == "text/html"
    logo, stamp = related.get_payload()[1:]
    assert (logo.get_content_disposition(), logo.get_filename()) == ("inline", "logo.png")
    assert (stamp.get_content_disposition(), stamp["Content-ID"]) == ("inline", "<stamp>")
    assert mail.get_payload(1).get_content_disposition() == "attachment"


def test_stored_template_with_the_sdks_fallback_body(mailtarget, layang, upstream, relay_to):
    layang.templates.create(
        id="shipped",
        name="Shipped",
        subject="Order {{order}} shipped",
        body_html="<p>Hi {{name}}, order {{order}} is on its way.</p>",
        body_text="Hi {{name}}, order {{order}} is on its way.",
    )
    layang.templates.create(
        id="html-only", name="HTML only", subject="Hello", body_html="<p>Hi {{name}}</p>"
    )
    for template_id, to in (("shipped", "ana@rcpt.example"), ("html-only", "bo@rcpt.example")):
        mailtarget.send(
            Message(
                from_address=SHOP,
                to=[Address(email=to)],
                body_text="Plain fallback for {{name}}.",  # is_valid() insists on a body
                template_id=template_id,
                substitution_data={"name": "Ana & Bo", "order": "A-42"},
                options_attributes=OptionsAttributes(open_tracking=False),
            )
        )
    drain(relay_to(upstream))

    full = parsed(received_by(upstream, "ana@rcpt.example"))
    assert full["Subject"] == "Order A-42 shipped"
    assert text_of(full, "plain").strip() == "Hi Ana & Bo, order A-42 is on its way."
    assert "Hi Ana &amp; Bo, order A-42" in text_of(full, "html")
    # The template has no text part: the request's body fills it in, as sent.
    partial = parsed(received_by(upstream, "bo@rcpt.example"))
    assert partial["Subject"] == "Hello"
    assert text_of(partial, "plain").strip() == "Plain fallback for {{name}}."
    assert "<p>Hi Ana &amp; Bo</p>" in text_of(partial, "html")


def test_request_subject_with_a_template_is_rendered_raw(mailtarget, layang, upstream, relay_to):
    layang.templates.create(id="t", name="T", subject="Template subject", body_text="Hi {{name}}")
    mailtarget.send(
        Message(
            subject="Hi {{name}}, {{ order.id }}",
            from_address=SHOP,
            to=[Address(email="ana@rcpt.example")],
            body_text="fallback",
            template_id="t",
            substitution_data={"name": "Ana <& Co>", "order": {"id": 7}},
        )
    )
    drain(relay_to(upstream))
    mail = parsed(received_by(upstream, "ana@rcpt.example"))
    assert mail["Subject"] == "Hi Ana <& Co>, 7"
    assert text_of(mail, "plain").strip() == "Hi Ana <& Co>"


def test_refusals_reach_the_sdk_as_its_error(mailtarget, layang):
    def send(**changes):
        fields = {
            "subject": "x",
            "from_address": SHOP,
            "to": [Address(email="ana@rcpt.example")],
            "body_text": "x",
            **changes,
        }
        with pytest.raises(MailtargetAPIError) as caught:
            mailtarget.send(Message(**fields))
        return caught.value

    error = send(headers=[Header(name="Bcc", value="victim@evil.example")])
    assert (error.status_code, error.error) == (400, "validation_failed")
    assert str(error).startswith("headers.0.name:")
    error = send(metadata={"blob": "x" * 11_000})
    assert (error.status_code, str(error).split(":")[0]) == (400, "metadata")
    error = send(attachment=[Attachment(filename="a.png", value=b64(PNG), disposition="hidden")])
    assert str(error).startswith("attachments.0.disposition:")
    error = send(template_id="no-such-template")
    assert (error.status_code, error.error) == (404, "template_not_found")
    assert list(layang.activity.list()) == []


def test_what_the_sdk_sends_is_what_this_suite_assumes():
    # The shape the server-side tests rely on; a new SDK release that changes it shows here.
    body = json.loads(
        Message(
            from_address=SHOP,
            to=[Address(email="ana@rcpt.example")],
            attachment=[Attachment(filename="a.txt", value="eA==")],
        ).to_json()
    )
    assert body == {
        "subject": "",
        "from": {"email": "shop@shop.example", "name": "The Shop"},
        "replyTo": [],
        "to": [{"email": "ana@rcpt.example", "name": ""}],
        "cc": [],
        "bcc": [],
        "bodyText": "",
        "bodyHtml": "",
        "headers": [],
        "attachments": [
            {
                "mimeType": "",
                "filename": "a.txt",
                "value": "eA==",
                "contentId": "",
                "disposition": "",
            }
        ],
        "metadata": {},
        "optionsAttributes": {"clickTracking": False, "openTracking": False, "transactional": True},
        "templateId": "",
        "substitutionData": {},
    }
    assert Layang.APIBase == "https://apiconfig.mailtarget.co"
