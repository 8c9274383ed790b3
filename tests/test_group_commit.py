"""Concurrent intake on SQLite shares commits: every caller returns only once its own rows are
committed, a failing insert fails only its own caller, and nothing is ever half-stored."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from dataclasses import replace

import peewee
import pytest

from layang.db import database
from layang.ids import new_id
from layang.mail.message import Attachment, Mailbox, OutgoingMessage
from layang.mail.outbox import PAYLOAD_CHUNK_CHARS, Submission, enqueue
from layang.models import PayloadChunk, Recipient, Transmission


def submission(transmission_id=None, subject="s", recipients=2):
    return Submission(
        transmission_id=transmission_id or new_id(),
        created_at=int(time.time() * 1000),
        source="smtp",
        mail_from="shop@sender.test",
        from_header='{"email": "shop@sender.test"}',
        subject=subject,
        message_id=f"<{subject}@sender.test>",
        metadata={},
        recipients=[(f"r{n}@rcpt.test", "to") for n in range(recipients)],
        raw=b"Subject: s\r\n\r\nhi\r\n",
    )


def enqueue_together(account, submissions):
    """Enqueue each submission from its own thread, all queued behind one held write lock so
    that they are committed as one group; returns each one's exception or None."""
    outcomes: dict[int, BaseException | None] = {}

    def run(n):
        try:
            enqueue(account, submissions[n])
        except Exception as error:
            outcomes[n] = error
        else:
            outcomes[n] = None
        finally:
            database.close()

    group_commit = database.obj.group_commit
    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(submissions))]
    with database.obj.write_lock:
        for thread in threads:
            thread.start()
        # One leader waits for the lock; the others queue behind it.
        deadline = time.monotonic() + 10
        while len(group_commit._queue) < len(submissions) - 1:
            assert time.monotonic() < deadline, "the callers did not queue up"
            time.sleep(0.01)
    for thread in threads:
        thread.join()
    return [outcomes[n] for n in range(len(submissions))]


def stored_subjects():
    return sorted(t.subject for t in Transmission.select())


def test_concurrent_inserts_all_land_with_all_their_rows(app, account):
    submissions = [submission(subject=f"m{n}", recipients=n % 3 + 1) for n in range(24)]
    assert enqueue_together(account, submissions) == [None] * 24
    assert stored_subjects() == sorted(f"m{n}" for n in range(24))
    for sub in submissions:
        stored = Recipient.select().where(Recipient.transmission == sub.transmission_id).count()
        assert stored == len(sub.recipients)


def test_a_bad_insert_fails_only_its_own_caller(app, account):
    taken = new_id()
    enqueue(account, submission(taken, subject="first"))
    submissions = [submission(subject=f"m{n}") for n in range(8)]
    submissions[3] = submission(taken, subject="duplicate")
    outcomes = enqueue_together(account, submissions)
    assert isinstance(outcomes[3], peewee.IntegrityError)
    assert outcomes[:3] + outcomes[4:] == [None] * 7
    assert stored_subjects() == sorted(["first", *(f"m{n}" for n in range(8) if n != 3)])
    assert Recipient.select().where(Recipient.transmission == taken).count() == 2


def test_a_large_message_in_a_failed_group_is_stored_whole_when_tried_alone(app, account):
    """Its chunks are made again for the second try, and stored once."""
    taken = new_id()
    enqueue(account, submission(taken, subject="first"))
    content = base64.b64encode(os.urandom(PAYLOAD_CHUNK_CHARS * 2)).decode()
    message = OutgoingMessage(
        Mailbox("shop@sender.test"),
        "large",
        to=(Mailbox("r0@rcpt.test"),),
        text="See the attachment.",
        attachments=(Attachment("data.bin", content),),
    )
    large = replace(submission(subject="large", recipients=1), raw=None, message=message)
    submissions = [submission(subject="m0"), large, submission(taken, subject="duplicate")]
    outcomes = enqueue_together(account, submissions)
    assert outcomes[:2] == [None, None]
    assert isinstance(outcomes[2], peewee.IntegrityError)
    assert stored_subjects() == ["first", "large", "m0"]
    chunks = PayloadChunk.select().where(PayloadChunk.transmission == large.transmission_id)
    text = "".join(chunk.text for chunk in chunks.order_by(PayloadChunk.seq))
    assert OutgoingMessage.from_payload(json.loads(text)) == message


def test_a_failing_database_fails_every_caller_of_the_group_and_stores_nothing(app, account):
    database.execute_sql(
        "CREATE TRIGGER refuse BEFORE INSERT ON recipient "
        "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
    )
    outcomes = enqueue_together(account, [submission(subject=f"m{n}") for n in range(6)])
    assert all(isinstance(o, peewee.DatabaseError) for o in outcomes), outcomes
    assert len({id(o) for o in outcomes}) == 6  # each caller raises its own exception
    assert stored_subjects() == []  # no transmission kept without its recipients

    database.execute_sql("DROP TRIGGER refuse")
    assert enqueue_together(account, [submission(subject=f"n{n}") for n in range(3)]) == [None] * 3
    assert stored_subjects() == ["n0", "n1", "n2"]


def test_inside_an_open_transaction_the_insert_joins_it(app, account):
    with pytest.raises(RuntimeError), database.atomic():
        enqueue(account, submission(subject="rolled back"))
        raise RuntimeError
    assert stored_subjects() == []
