"""Reading routed inbound mail: replies in the quoting of real clients stripped right, names
and charsets decoded, broken mail read without raising."""

from __future__ import annotations

from layang.mail.received import read_received

GMAIL = (
    b"From: Ann <ann@sender.example>\r\nSubject: Re: Ticket\r\n"
    b'Content-Type: multipart/alternative; boundary="g"\r\nMIME-Version: 1.0\r\n\r\n'
    b'--g\r\nContent-Type: text/plain; charset="UTF-8"\r\n\r\n'
    b"Thanks, it works now.\r\n\r\n"
    b"On Sat, Nov 28, 2026 at 9:00\xe2\x80\xafAM Shop Support <support@in.shop.example> "
    b"wrote:\r\n\r\n> Hello Ann,\r\n>\r\n> did the reset work?\r\n>\r\n\r\n"
    b'--g\r\nContent-Type: text/html; charset="UTF-8"\r\n\r\n'
    b'<div dir="ltr">Thanks, it works now.</div><br><div class="gmail_quote">'
    b"<blockquote>Hello Ann</blockquote></div>\r\n--g--\r\n"
)

OUTLOOK = (
    b"From: Ann <ann@sender.example>\r\nSubject: RE: Ticket\r\n"
    b"Content-Type: text/plain; charset=windows-1252\r\nMIME-Version: 1.0\r\n"
    b"Content-Transfer-Encoding: quoted-printable\r\n\r\n"
    b"Thanks =96 it works now.\r\n\r\n"
    b"________________________________\r\n"
    b"From: Shop Support <support@in.shop.example>\r\n"
    b"Sent: Saturday, November 28, 2026 9:00 AM\r\n"
    b"To: Ann <ann@sender.example>\r\n"
    b"Subject: Ticket\r\n\r\n"
    b"Hello Ann,\r\n\r\ndid the reset work?\r\n"
)

APPLE = (
    b"From: Ann <ann@sender.example>\r\nSubject: Re: Ticket\r\n"
    b"Content-Type: text/plain; charset=us-ascii\r\nMIME-Version: 1.0 (Mac OS X Mail 16.0)\r\n"
    b"Content-Transfer-Encoding: 7bit\r\n\r\n"
    b"Thanks, it works now.\r\n\r\n"
    b"> On 28 Nov 2026, at 09:00, Shop Support <support@in.shop.example> wrote:\r\n"
    b">\r\n> Hello Ann,\r\n>\r\n> did the reset work?\r\n"
)


def test_replies_lose_the_quoted_history_of_gmail_outlook_and_apple_mail():
    assert read_received(GMAIL).stripped_text_reply == "Thanks, it works now."
    outlook = read_received(OUTLOOK)
    assert outlook.text.startswith("Thanks \u2013 it works now.")  # windows-1252's 0x96
    assert outlook.stripped_text_reply == "Thanks \u2013 it works now."
    assert read_received(APPLE).stripped_text_reply == "Thanks, it works now."


def test_an_html_only_reply_is_stripped_from_its_text_rendering():
    html_only = (
        b"From: a@sender.example\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
        b"<p>Sounds good.</p><p>On Sat, Nov 28, 2026 at 9:00 AM Shop &lt;s@in.shop.example&gt;"
        b" wrote:</p><blockquote>Shall we?</blockquote>"
    )
    found = read_received(html_only)
    assert found.text == "" and "<p>Sounds good.</p>" in found.html
    assert found.stripped_text_reply == "Sounds good."


def test_encoded_words_and_rfc2231_names_are_decoded():
    data = (
        b"From: =?UTF-8?Q?J=C3=BCrgen?= <j@sender.example>\r\n"
        b"Subject: =?ISO-8859-1?B?R3L832U=?=\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="m"\r\n\r\n'
        b"--m\r\nContent-Type: text/plain; charset=koi8-r\r\n\r\n\xf0\xd2\xc9\xd7\xc5\xd4\r\n"
        b"--m\r\nContent-Type: application/pdf\r\n"
        b"Content-Disposition: attachment; filename*0*=UTF-8''%C3%9Cbersicht%20;"
        b" filename*1*=M%C3%A4rz.pdf\r\nContent-Transfer-Encoding: base64\r\n\r\nJVBERg==\r\n"
        b'--m\r\nContent-Type: image/png; name="=?UTF-8?B?w6TDtsO8LnBuZw==?="\r\n'
        b"Content-ID: <logo@x>\r\nContent-Transfer-Encoding: base64\r\n\r\niVBORw==\r\n--m--\r\n"
    )
    found = read_received(data)
    assert found.from_.name == "J\u00fcrgen" and found.subject == "Gr\u00fc\u00dfe"
    assert found.text.strip() == "\u041f\u0440\u0438\u0432\u0435\u0442"
    pdf, png = found.attachments
    assert pdf.filename == "\u00dcbersicht M\u00e4rz.pdf" and pdf.content == b"%PDF"
    assert png.filename == "\u00e4\u00f6\u00fc.png" and png.content_id == "logo@x"


def test_anything_at_all_is_read_without_raising():
    for data in (b"", b"\x00\xff" * 100, b"Content-Type: multipart/mixed\r\n\r\n--", b"\r\n\r\n"):
        found = read_received(data)
        assert found.problem is None or isinstance(found.problem, str)
