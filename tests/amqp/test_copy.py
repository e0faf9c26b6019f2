"""What each copy carries and where it goes, written once for the worker and the DLQ
tools (rabbitq._amqp.copy): the target queue, the headers and the properties."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rabbitq import App, Message, RetryPolicy
from rabbitq._amqp import copy
from rabbitq._amqp import headers as h
from rabbitq.dlq import DeadMessage
from rabbitq.outcome import DeadLetter, Retry
from rabbitq.retry import EXHAUSTED

WHEN = datetime(2026, 11, 25, 7, 0, tzinfo=UTC)


class Mail(Message, type="copy.mail"):
    to: str


def _topology():
    app = App(queue="mails", retry=RetryPolicy(delays=(1, 10)))
    app.handler(Mail)(lambda m: None)
    return app.topology()


TOPOLOGY = _topology()


@dataclass
class Delivery:
    body: bytes = b'{"to": "a@b.c"}'
    headers: dict[str, Any] = field(default_factory=lambda: {"tenant": "acme", "x-death": []})
    exchange: str | None = "rabbitq"
    routing_key: str | None = "email.send"
    content_type: str | None = "application/json"
    content_encoding: str | None = None
    priority: int | None = 3
    correlation_id: str | None = "c-1"
    reply_to: str | None = None
    app_id: str | None = "shop"
    message_id: str | None = "m-1"
    timestamp: datetime | None = WHEN


def test_a_retry_copy_goes_to_the_tier_of_its_delay_with_the_next_attempt():
    c = copy.retry(
        Delivery(), Retry(10_000, 3), type_name="email.send", error="E: x", topology=TOPOLOGY,
        queue="mails",
    )
    assert c.target == "mails.retry.10s" and c.body == b'{"to": "a@b.c"}'
    headers = c.properties.headers or {}
    assert headers[h.ATTEMPT] == 3 and headers[h.ERROR] == "E: x"
    assert headers["tenant"] == "acme" and "x-death" not in headers
    assert headers[h.ORIGINAL_ROUTING_KEY] == "email.send"
    p = c.properties
    assert (p.message_id, p.message_type, p.priority, p.delivery_mode) == (
        "m-1",
        "email.send",
        3,
        2,
    )


def test_a_dead_letter_copy_goes_to_the_dlq_with_its_reason_and_where_it_failed():
    c = copy.dead_letter(
        Delivery(),
        DeadLetter(EXHAUSTED),
        type_name="email.send",
        error="E: x",
        traceback="Traceback ...",
        attempt=4,
        queue="mails",
        topology=TOPOLOGY,
    )
    assert c.target == "mails.dlq"
    headers = c.properties.headers or {}
    assert headers[h.REASON] == EXHAUSTED and headers[h.QUEUE] == "mails"
    assert headers[h.ATTEMPT] == 4 and headers[h.TRACEBACK] == "Traceback ..."


def test_a_replay_of_that_dead_letter_starts_over_and_counts_the_replay():
    dead = copy.dead_letter(
        Delivery(),
        DeadLetter(EXHAUSTED),
        type_name="email.send",
        error="E: x",
        traceback=None,
        attempt=4,
        queue="mails",
        topology=TOPOLOGY,
    )
    m = DeadMessage(
        dlq="mails.dlq",
        body=dead.body,
        properties={"message_id": "m-1", "type": "email.send", "user_id": "guest"},
        headers=dict(dead.properties.headers or {}),
    )
    again = copy.replay(m, user="other")
    headers = again.properties.headers or {}
    assert h.REASON not in headers and h.ATTEMPT not in headers and h.QUEUE not in headers
    assert headers[h.REPLAYED] == 1 and headers["tenant"] == "acme"
    assert again.target == "" and again.properties.user_id is None
    assert copy.stored(m).properties.headers == m.headers
