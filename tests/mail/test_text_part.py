"""An HTML-only send gets a text/plain alternative made from its HTML, as the upstream server
receives it; ``generateText: false`` sends the HTML alone."""

from __future__ import annotations

from tests.conftest import drain

HTML = (
    "<html><head><style>p { color: red }</style></head><body><h1>Order 42 shipped</h1>"
    '<p>Hello Ana, follow it on <a href="https://shop.test/o/42?a=1&amp;b=2">your order '
    'page</a> or at <a href="https://shop.test/help">https://shop.test/help</a>.</p>'
    "<table><tr><td>Shoes</td><td>1</td></tr></table><script>var x = 1;</script>"
    '<img src="https://shop.test/logo.png" alt=""></body></html>'
)


def send(client, auth, **options):
    body = {
        "from": {"email": "shop@sender.test"},
        "to": [{"email": "ana@rcpt.test"}],
        "subject": "Shipped",
        "bodyHtml": HTML,
    }
    if options:
        body["optionsAttributes"] = options
    response = client.post("/v1/layang/transmissions", json=body, headers=auth)
    assert response.status_code == 200, response.get_json()


def test_html_only_mail_gets_a_text_alternative_with_its_links(client, auth, upstream, relay_to):
    send(client, auth)
    drain(relay_to(upstream))
    message = upstream.received[0].message
    assert message.get_content_type() == "multipart/alternative"
    plain, html = message.get_payload()
    assert (plain.get_content_type(), html.get_content_type()) == ("text/plain", "text/html")
    text = plain.get_content().replace("\r\n", "\n")
    assert text == (
        "Order 42 shipped\n\n"
        "Hello Ana, follow it on [your order page](https://shop.test/o/42?a=1&b=2) or at "
        "https://shop.test/help.\n\n"
        "Shoes  1\n"
    )
    assert html.get_content().replace("\r\n", "\n") == HTML + "\n"


def test_generate_text_false_sends_the_html_alone(client, auth, upstream, relay_to):
    send(client, auth, generateText=False)
    drain(relay_to(upstream))
    message = upstream.received[0].message
    assert message.get_content_type() == "text/html"
    assert b"text/plain" not in upstream.received[0].data
