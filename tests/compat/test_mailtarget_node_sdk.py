"""The requests of Mailtarget's Node SDK (``@mailtarget/sdk``, source: github.com/mailtarget/
mailtarget-nodejs-sdk, ``src/lib/layang.ts`` and ``src/lib/http.ts``) against a live Layang.

No Node runs here: :class:`NodeLayang` below builds exactly the bodies those two files send,
field for field, including the defaults every request carries (``cc: []``, ``bodyText: ""``,
``metadata: {}``, tracking on), and posts them with the headers axios sends. Its public surface:
``new Layang(apiKey, sender)``, ``sendMessage(subject, to, bodyHtml)``,
``sendMessageTemplate(subject, to, templateId, substitutionData = {})``, the public fields
``replyTo``, ``cc``, ``bcc``, ``bodyText``, ``headers``, ``attachment``, ``metadata``, and
``setClickTracking``, ``setOpenTracking``, ``setTransactional``.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx

from tests.compat.conftest import PNG, cid_targets, parsed, received_by, structure, text_of
from tests.conftest import drain

SENDER = {"email": "shop@shop.example", "name": "The Shop"}


class NodeLayang:
    """The Node SDK's ``Layang`` class, request for request; ``base`` stands for the
    hard-coded ``https://apiconfig.mailtarget.co``."""

    def __init__(self, base: str, api_key: str, sender: dict[str, str]) -> None:
        self.base, self.api_key, self.sender = base, api_key, sender
        self.options_attributes = {
            "clickTracking": True,
            "openTracking": True,
            "transactional": True,
        }
        self.reply_to: list[dict[str, str]] = []
        self.cc: list[dict[str, str]] = []
        self.bcc: list[dict[str, str]] = []
        self.body_text = ""
        self.headers: list[dict[str, str]] = []
        self.attachment: list[dict[str, str]] = []
        self.metadata: Any = {}
        self.error_message: Any = None

    def set_click_tracking(self, active: bool) -> None:
        self.options_attributes["clickTracking"] = active

    def set_open_tracking(self, active: bool) -> None:
        self.options_attributes["openTracking"] = active

    def set_transactional(self, active: bool) -> None:
        self.options_attributes["transactional"] = active

    def send_message(self, subject: str, to: list[dict[str, str]], body_html: str) -> str | None:
        return self._transmission(
            {
                "to": to,
                "bodyHtml": body_html,
                "subject": subject,
                **self._common(),
            }
        )

    def send_message_template(
        self,
        subject: str,
        to: list[dict[str, str]],
        template_id: str,
        substitution_data: dict[str, Any] | None = None,
    ) -> str | None:
        return self._transmission(
            {
                "subject": subject,
                "to": to,
                "templateId": template_id,
                "substitutionData": {} if substitution_data is None else substitution_data,
                **self._common(),
            }
        )

    def _common(self) -> dict[str, Any]:
        return {
            "from": self.sender,
            "replyTo": self.reply_to,
            "cc": self.cc,
            "bcc": self.bcc,
            "bodyText": self.body_text,
            "headers": self.headers,
            "attachment": self.attachment,
            "metadata": self.metadata,
            "optionsAttributes": dict(self.options_attributes),
        }

    def _transmission(self, payload: dict[str, Any]) -> str | None:
        # axios: JSON body; the SDK's own three headers; a non-2xx answer's body becomes the
        # error, and the method returns undefined.
        response = httpx.post(
            f"{self.base}/v1/layang/transmissions",
            json=payload,
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {self.api_key}",
                "Accept": "application/json",
            },
        )
        if response.is_success:
            self.error_message = None
            return response.json()["transmissionId"]
        self.error_message = response.json()
        return None


def node(live_server: str, api_key: str) -> NodeLayang:
    return NodeLayang(live_server, api_key, SENDER)


def test_send_message_with_every_default(live_server, api_key, layang, upstream, relay_to):
    sdk = node(live_server, api_key)
    html = '<p>Hello <a href="https://shop.example/x">there</a></p>'
    transmission_id = sdk.send_message("Hello", [{"email": "ana@rcpt.example", "name": ""}], html)
    assert transmission_id, sdk.error_message
    drain(relay_to(upstream))

    mail = parsed(received_by(upstream, "ana@rcpt.example"))
    assert mail["From"] == "The Shop <shop@shop.example>"
    assert mail["To"] == "ana@rcpt.example"
    assert mail["Subject"] == "Hello"
    # HTML alone: Layang adds the text part made from it (docs/api.md, "generateText").
    assert structure(mail) == ["multipart/alternative", "  text/plain", "  text/html"]
    sent = text_of(mail, "html")
    # Tracking is on by default in this SDK: the link is rewritten, a pixel is added.
    assert "https://shop.example/x" not in sent and sent.count("http://127.0.0.1:8000/") == 2
    (record,) = layang.activity.list(transmission_id=transmission_id)
    assert record["metadata"] == {}


def test_every_public_field(live_server, api_key, layang, upstream, relay_to):
    sdk = node(live_server, api_key)
    sdk.reply_to = [{"email": "help@shop.example", "name": "Help"}]
    sdk.cc = [{"email": "cy@rcpt.example", "name": "Cy"}]
    sdk.bcc = [{"email": "dee@rcpt.example", "name": ""}]
    sdk.body_text = "Plain version."
    sdk.headers = [{"name": "x-header", "value": "your header value"}]
    sdk.attachment = [
        {
            "mimeType": "application/octet-stream",
            "filename": "your_file.pdf",
            "value": base64.b64encode(b"some-value").decode(),
        }
    ]
    sdk.metadata = [{"metaKey": "meta-value"}, {"orderId": 42}]  # the README's shape
    sdk.set_click_tracking(False)
    sdk.set_open_tracking(False)
    sdk.set_transactional(False)
    transmission_id = sdk.send_message("All of it", [{"email": "ana@rcpt.example"}], "<p>Hi</p>")
    assert transmission_id, sdk.error_message
    drain(relay_to(upstream))

    # transactional: false gives each recipient a copy with its own unsubscribe link.
    received = received_by(upstream, "ana@rcpt.example")
    # One transaction per recipient (each has its own return path).
    assert sorted(r for copy in upstream.received for r in copy.rcpt_tos) == sorted(
        ["ana@rcpt.example", "cy@rcpt.example", "dee@rcpt.example"]
    )
    assert not any(b"dee@rcpt.example" in copy.data for copy in upstream.received)
    mail = parsed(received)
    assert mail["List-Unsubscribe"].startswith("<http://127.0.0.1:8000/u/")
    assert mail["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert mail["Reply-To"] == "Help <help@shop.example>"
    assert mail["Cc"] == "Cy <cy@rcpt.example>"
    assert mail["x-header"] == "your header value"
    assert structure(mail) == [
        "multipart/mixed",
        "  multipart/alternative",
        "    text/plain",
        "    text/html",
        "  application/octet-stream",
    ]
    assert text_of(mail, "plain") == "Plain version.\n"
    assert text_of(mail, "html") == "<p>Hi</p>\n"
    (attachment,) = mail.iter_attachments()
    assert attachment.get_filename() == "your_file.pdf"
    assert attachment.get_payload(decode=True) == b"some-value"
    records = list(layang.activity.list(transmission_id=transmission_id))
    assert len(records) == 3
    assert all(r["metadata"] == {"metaKey": "meta-value", "orderId": 42} for r in records)


def test_list_metadata_merges_later_keys_over_earlier(live_server, api_key, layang):
    sdk = node(live_server, api_key)
    sdk.metadata = [{"a": 1, "b": {"deep": [1, 2]}}, {"a": "two", "c": None}, {}]
    transmission_id = sdk.send_message("x", [{"email": "ana@rcpt.example"}], "<p>x</p>")
    assert transmission_id, sdk.error_message
    (record,) = layang.activity.list(transmission_id=transmission_id)
    assert record["metadata"] == {"a": "two", "b": {"deep": [1, 2]}, "c": None}

    sdk.metadata = [{"a": 1}, "b"]
    assert sdk.send_message("x", [{"email": "ana@rcpt.example"}], "<p>x</p>") is None
    assert sdk.error_message["message"].startswith("metadata: ")


def test_send_message_template(live_server, api_key, layang, upstream, relay_to):
    layang.templates.create(
        id="welcome",
        name="Welcome",
        subject="Welcome, {{lastname}}",
        body_html="<p>Dear {{lastname}}, born {{birthdate}}.</p>",
    )
    sdk = node(live_server, api_key)
    sdk.set_open_tracking(False)
    data = {"lastname": "Doe", "birthdate": "1 January 1975"}
    # With the subject the README passes, and with an empty one (the template's then applies).
    assert sdk.send_message_template(
        "mailtarget Email Test", [{"email": "a@rcpt.example"}], "welcome", data
    ), sdk.error_message
    assert sdk.send_message_template("", [{"email": "b@rcpt.example"}], "welcome", data)
    # A bodyText left on the object: the template has no text part, so it becomes that part.
    sdk.body_text = "Text version for {{lastname}}"
    assert sdk.send_message_template("Hi {{lastname}}", [{"email": "c@rcpt.example"}], "welcome")
    drain(relay_to(upstream))

    first = parsed(received_by(upstream, "a@rcpt.example"))
    assert first["Subject"] == "mailtarget Email Test"
    assert structure(first) == ["multipart/alternative", "  text/plain", "  text/html"]
    assert text_of(first, "html") == "<p>Dear Doe, born 1 January 1975.</p>\n"
    assert text_of(first, "plain").strip() == "Dear Doe, born 1 January 1975."
    assert parsed(received_by(upstream, "b@rcpt.example"))["Subject"] == "Welcome, Doe"
    third = parsed(received_by(upstream, "c@rcpt.example"))
    assert third["Subject"] == "Hi"  # no substitutionData: a missing value is empty
    assert structure(third) == ["multipart/alternative", "  text/plain", "  text/html"]
    assert text_of(third, "plain") == "Text version for {{lastname}}\n"
    assert text_of(third, "html") == "<p>Dear , born .</p>\n"


def test_template_parts_win_over_the_objects_body(live_server, api_key, layang, upstream, relay_to):
    layang.templates.create(
        id="both", name="Both", subject="S", body_html="<p>T {{n}}</p>", body_text="T {{n}}"
    )
    sdk = node(live_server, api_key)
    sdk.set_open_tracking(False)
    sdk.body_text = "left over from an earlier send"
    assert sdk.send_message_template("", [{"email": "a@rcpt.example"}], "both", {"n": 1})
    drain(relay_to(upstream))
    mail = parsed(received_by(upstream, "a@rcpt.example"))
    assert (text_of(mail, "plain"), text_of(mail, "html")) == ("T 1\n", "<p>T 1</p>\n")


def test_inline_image_through_the_attachment_field(live_server, api_key, upstream, relay_to):
    # The Node SDK's type has no contentId, but the body is passed through as given.
    sdk = node(live_server, api_key)
    sdk.set_open_tracking(False)
    sdk.attachment = [
        {
            "mimeType": "image/png",
            "filename": "logo.png",
            "value": base64.b64encode(PNG).decode(),
            "contentId": "logo",
            "disposition": "inline",
        }
    ]
    html = '<p><img src="cid:logo"></p>'
    assert sdk.send_message("Logo", [{"email": "a@rcpt.example"}], html), sdk.error_message
    drain(relay_to(upstream))
    mail = parsed(received_by(upstream, "a@rcpt.example"))
    assert structure(mail) == ["multipart/related", "  text/html", "  image/png"]
    assert cid_targets(mail) == {"logo": PNG}


def test_errors_come_back_as_the_error_body(live_server, api_key):
    sdk = node(live_server, api_key)
    sdk.headers = [{"name": "Subject", "value": "x"}]
    assert sdk.send_message("x", [{"email": "a@rcpt.example"}], "<p>x</p>") is None
    assert sdk.error_message["status"] == 400
    assert sdk.error_message["message"].startswith("headers.0.name: ")
    sdk.headers = []
    assert sdk.send_message_template("x", [{"email": "a@rcpt.example"}], "missing") is None
    assert sdk.error_message["error"] == "template_not_found"
