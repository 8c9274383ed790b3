"""The intake baseline: a bare Flask app doing the same JSON parse, the same marshmallow load and
one insert, on a database with the same durability settings as Layang's."""

from __future__ import annotations

import json
import os
import uuid

import flask
import peewee
from playhouse.db_url import connect

from layang.api.transmissions import TransmissionRequestSchema
from layang.db import SQLITE_PRAGMAS

url = os.environ.get("BASELINE_DB_URL") or f"sqlite:///{os.environ['BASELINE_DB']}"
db = connect(url, **({"pragmas": SQLITE_PRAGMAS} if url.startswith("sqlite") else {}))


class Message(peewee.Model):
    id = peewee.CharField(primary_key=True)
    payload = peewee.TextField()

    class Meta:
        database = db
        table_name = "baseline_message"


db.connect()
db.create_tables([Message], safe=True)
schema = TransmissionRequestSchema()
app = flask.Flask("baseline")


@app.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/v1/layang/transmissions")
def transmissions() -> dict[str, str]:
    data = schema.load(flask.request.get_json())
    message_id = uuid.uuid4().hex
    with db.atomic():
        Message.insert(id=message_id, payload=json.dumps(data, default=str)).execute()
    return {"transmissionId": message_id}
