"""Rewriting the header of a message submitted over SMTP, as each recipient's copy needs it:
named fields go (folded lines and all, whatever their case), the new ones end the header, and
every other byte stays as it was."""

from __future__ import annotations

from layang.mail.message import Header
from layang.mail.submitted import prepare_submission, with_fields
from layang.mail.unsubscribe import HEADER_NAMES, UnsubscribeTokens

BODY = b"\r\nList-Unsubscribe: <https://in.the.body/stays>\r\n\r\nSecond paragraph.\r\n"
RAW = (
    b"From: Shop <shop@example.com>\r\n"
    b"LIST-UNSUBSCRIBE: <https://shop.example/leave?u=42>,\r\n"
    b"\t<mailto:leave@shop.example>\r\n"
    b"To: ana@rcpt.test\r\n"
    b"List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"
    b"Subject: This week\r\n"
    b" and next\r\n" + BODY
)


def test_named_fields_are_replaced_and_every_other_byte_kept():
    rewritten = with_fields(RAW, HEADER_NAMES, [Header("List-Unsubscribe", "<https://x.test/u>")])
    assert rewritten == (
        b"From: Shop <shop@example.com>\r\n"
        b"To: ana@rcpt.test\r\n"
        b"Subject: This week\r\n"
        b" and next\r\n"
        b"List-Unsubscribe: <https://x.test/u>\r\n" + BODY
    )
    assert with_fields(RAW, frozenset(), []) == RAW


def test_a_long_list_is_folded_after_each_comma_as_composing_does():
    tokens = UnsubscribeTokens("key", "https://layang.example.net", "bounces.layang.example.net")
    copy = tokens.add_to(RAW, "01m8j6pfj4hy9c77bez6j5jzj7")
    token = tokens.token("01m8j6pfj4hy9c77bez6j5jzj7")
    assert copy.endswith(
        b"Subject: This week\r\n and next\r\n"
        b"List-Unsubscribe: <https://layang.example.net/u/" + token.encode() + b">,\r\n"
        b" <mailto:u+" + token.encode() + b"@bounces.layang.example.net>\r\n"
        b"List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n" + BODY
    )
    assert copy.count(b"shop.example") == 0
    # Applied again (a retry of the same copy), it comes out the same.
    assert tokens.add_to(copy, "01m8j6pfj4hy9c77bez6j5jzj7") == copy


def test_a_stored_submission_is_rewritten_in_place():
    prepared = prepare_submission(RAW, "01m8j6pfj4hy9c77bez6j5jzj7", 0, "shop@example.com")
    rewritten = with_fields(prepared.raw, {"subject"}, [Header("Subject", "Replaced")])
    head = rewritten.split(b"\r\n\r\n", 1)[0]
    assert head.endswith(b"\r\nSubject: Replaced") and b"and next" not in head
    assert rewritten.endswith(BODY)


def test_a_value_that_is_not_ascii_is_written_as_utf8():
    # RFC 6532: a header field may carry UTF-8 (an address with a non-ASCII local part).
    added = Header("Reply-To", "<jörg@shop.example>")
    rewritten = with_fields(RAW, HEADER_NAMES, [added])
    assert "Reply-To: <jörg@shop.example>\r\n".encode() in rewritten
    assert rewritten.endswith(BODY)
