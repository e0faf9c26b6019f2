"""Poison input against a real broker: hypothesis writes raw messages (random bodies,
properties and header values, and bytes no well-behaved client would send) and each
one must end handled or in the DLQ with a reason, while the worker keeps consuming and
its memory stays bounded (docs/contract.md, guarantee 4)."""

from __future__ import annotations

import datetime
import gc
import os
import struct
from collections import Counter
from typing import Any

import aio_pika
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pamqp import encode

from rabbitq import App, Message, RetryPolicy, Worker
from rabbitq._amqp import headers as h
from rabbitq.retry import REASONS
from tests.helpers import Recorder, publish_bare, running, wait_for

pytestmark = pytest.mark.broker

TYPE = "test.poison.order"
MAX_BODY = 4096
TRACK = "fuzz-n"  # our own header, carried to copies, to find each message again


class Order(Message, type=TYPE):
    n: int
    note: str = ""


class Tracker(Recorder):
    """Outcomes by kind, and every DLQ copy by its ``fuzz-n``."""

    def __init__(self) -> None:
        super().__init__()
        self.published = 0
        self.handled: list[int] = []
        self.dead: dict[int, dict[str, Any]] = {}


def _short(raw: bytes) -> bytes:
    return bytes([len(raw)]) + raw


# Header items as raw bytes, including what pamqp itself would refuse to decode.
hostile_items = st.one_of(
    st.binary(min_size=1, max_size=8)
    .filter(lambda k: k != TRACK.encode())
    .map(lambda k: _short(k) + b"S\x00\x00\x00\x01x"),
    st.binary(max_size=16).map(lambda b: _short(b"s") + b"S" + struct.pack(">I", len(b)) + b),
    st.integers(0, 2**64 - 1).map(lambda n: _short(b"t") + b"T" + struct.pack(">Q", n)),
    st.integers(0, 2**32 - 1).map(lambda n: _short(b"d") + b"D\x03" + struct.pack(">I", n)),
    # RabbitMQ itself refuses NaN and infinities in a table (INTERNAL_ERROR on publish)
    st.floats(allow_nan=False, allow_infinity=False).map(
        lambda f: _short(b"f") + b"d" + struct.pack(">d", f)
    ),
    st.integers(1, 3000).map(  # tables nested far deeper than anyone should
        lambda depth: _short(b"deep") + _nested(depth)
    ),
    st.sampled_from([b"S", b"I", b"l", b"t", b"x"]).map(  # rabbitq-attempt of any wire type
        lambda kind: (
            _short(h.ATTEMPT.encode())
            + {
                b"S": b"S\x00\x00\x00\x02-7",
                b"I": b"I\xff\xff\xff\xfe",
                b"l": b"l\x7f\xff\xff\xff\xff\xff\xff\xff",
                b"t": b"t\x01",
                b"x": b"x\x00\x00\x00\x013",
            }[kind]
        )
    ),
)


def _nested(depth: int) -> bytes:
    raw = b"F\x00\x00\x00\x00"
    for _ in range(depth):
        inner = _short(b"n") + raw
        raw = b"F" + struct.pack(">I", len(inner)) + inner
    return raw


header_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.floats(width=32, allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
        st.binary(max_size=20).map(bytearray),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)

orders = st.builds(  # a valid Order most of the time, or one whose handler always fails
    lambda n, note: orjson.dumps({"note": note})[:-1] + b',"n":%d}' % n,
    st.integers(-(2**63), 2**63 - 1) | st.integers(-(2**70), 2**70),
    st.sampled_from(["", "fail"]),
)
bodies = st.one_of(
    orders,
    orders,
    st.binary(max_size=300),
    st.integers(1, 20_000).map(lambda d: b"[" * d + b"]" * d),  # deep JSON
    st.integers(MAX_BODY + 1, 100_000).map(lambda size: b"{" + b" " * (size - 2) + b"}"),
    st.sampled_from([b"", b"{}", b"null", b'{"n": "1"}', b'{"n": 1e999}', b"\xef\xbb\xbf{}"]),
)


@st.composite
def raw_messages(draw: st.DrawFn) -> dict[str, Any]:
    headers = draw(
        st.dictionaries(st.text(max_size=10).filter(lambda k: k != TRACK), header_values)
    )
    if draw(st.booleans()):
        headers[h.ATTEMPT] = draw(header_values)
    return {
        "body": draw(bodies),
        "headers": headers,
        "hostile": draw(st.lists(hostile_items, max_size=3)),
        "type": draw(st.one_of(st.just(TYPE), st.just(TYPE), st.none(), st.text(max_size=12))),
        "message_id": draw(st.one_of(st.none(), st.text(max_size=30))),
        "hostile_message_id": draw(st.booleans()),
        "content_type": draw(st.one_of(st.none(), st.text(max_size=20))),
        "content_encoding": draw(st.one_of(st.none(), st.sampled_from(["gzip", "x", ""]))),
        "timestamp": draw(st.one_of(st.none(), st.integers(0, 2**64 - 1))),
        "via_exchange": draw(st.booleans()),
    }


async def publish_hostile(url: str, app: App, n: int, msg: dict[str, Any]) -> None:
    """Publish with pamqp, then splice the hostile bytes into the content header."""
    headers = {**msg["headers"], TRACK: n}
    marker = encode.field_table(headers)
    properties: dict[str, Any] = {"headers": headers}
    for name in ("type", "message_id", "content_type", "content_encoding"):
        if msg[name] is not None:
            properties[name] = msg[name]
    if msg["hostile_message_id"]:
        properties["message_id"] = "MID-MARKER"
    if msg["timestamp"] is not None:
        properties["timestamp"] = datetime.datetime(2001, 2, 3, tzinfo=datetime.UTC)

    def patch(content: bytes) -> bytes:
        items = marker[4:] + b"".join(msg["hostile"])
        content = content.replace(marker, struct.pack(">I", len(items)) + items, 1)
        content = content.replace(_short(b"MID-MARKER"), _short(b"MID-\xff\xfe\xc0"), 1)
        if msg["timestamp"] is not None:
            content = content.replace(
                struct.pack(">Q", 981158400), struct.pack(">Q", msg["timestamp"]), 1
            )
        return content

    if msg["via_exchange"] and msg["type"] == TYPE:
        exchange, key = app.exchange, TYPE
    else:
        exchange, key = "", app.queue  # straight to the queue, whatever its type says
    await publish_bare(url, exchange, key, msg["body"], _patch=patch, **properties)


@pytest.fixture
async def poison_worker(make_app, broker_url, connection):
    app = make_app(retry=RetryPolicy(delays=(0.05,)), max_body_size=MAX_BODY, prefetch=16)
    tracker = Tracker()

    @app.handler(Order)
    async def handle(order: Order, ctx) -> None:
        if order.note == "fail":
            raise RuntimeError("fails every time")
        tracker.handled.append(ctx.headers[TRACK])

    worker = Worker(app, hooks=tracker, grace_period=5)
    async with running(worker):
        channel = await connection.channel()
        dlq = await channel.declare_queue(app.topology().dlq.name, passive=True)

        async def on_dead(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            await message.ack()
            tracker.dead[int(message.headers[TRACK])] = dict(message.headers)

        await dlq.consume(on_dead)
        yield app, worker, tracker
        await channel.close()
    reasons = Counter(str(d[h.REASON]) for d in tracker.dead.values())
    print(f"poison: {tracker.published} published, {len(tracker.handled)} handled, {reasons}")


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(msg=raw_messages())
@example(  # fails every time: its retry copy and DLQ copy carry every hostile header
    msg={
        "body": b'{"n": 1, "note": "fail"}',
        "headers": {"float": 1.5, "nested": {"a": [1, None]}},
        "hostile": [
            _short(b"s") + b"S\x00\x00\x00\x02\xff\xfe",
            _short(b"t") + b"T" + struct.pack(">Q", 2**64 - 1),
            _short(b"d") + b"D\x03\xff\xff\xff\xff",
            _short(b"deep") + _nested(3000),
            _short(b"\xff\xfe") + b"S\x00\x00\x00\x01x",
        ],
        "type": TYPE,
        "message_id": None,
        "hostile_message_id": True,
        "content_type": "text/plain",
        "content_encoding": "gzip",
        "timestamp": 2**64 - 1,
        "via_exchange": True,
    }
)
async def test_every_raw_message_ends_handled_or_dead_lettered_with_a_reason(
    poison_worker, broker_url, msg
):
    app, worker, tracker = poison_worker
    tracker.published += 1
    n = tracker.published
    await publish_hostile(broker_url, app, n, msg)
    await wait_for(lambda: n in tracker.handled or n in tracker.dead, timeout=20)
    assert tracker.count("requeued") == 0
    assert worker.ready.is_set()
    if n in tracker.dead:
        headers = tracker.dead[n]
        assert headers[h.REASON] in REASONS
        assert headers[h.ERROR]
        assert n not in tracker.handled
        if len(msg["body"]) > MAX_BODY and msg["type"] == TYPE:
            assert headers[h.REASON] == "invalid"
            assert str(headers[h.ERROR]).startswith("BodyTooLarge:")


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def test_memory_stays_bounded_while_oversized_and_nested_bodies_pass(make_app, connection):
    app = make_app(retry=RetryPolicy(delays=()), max_body_size=64 * 1024, prefetch=8)

    @app.handler(Order)
    async def handle(order: Order) -> None:
        pass

    rec = Recorder()
    big = b'{"n": 1, "note": "' + b"x" * (2 * 1024 * 1024) + b'"}'  # 2 MiB, over the limit
    deep = b"[" * 30_000 + b"]" * 30_000  # under the limit, nested far too deeply
    channel = await connection.channel(publisher_confirms=True)

    async def batch(count: int) -> None:
        before = rec.count("dead_lettered")
        for i in range(count):
            body = big if i % 2 else deep
            message = aio_pika.Message(body, type=TYPE, delivery_mode=2)
            await channel.default_exchange.publish(message, routing_key=app.queue)
        await wait_for(lambda: rec.count("dead_lettered") == before + count, timeout=60)

    async with running(Worker(app, hooks=rec, grace_period=5)):
        dlq = await channel.declare_queue(app.topology().dlq.name, passive=True)
        await batch(20)  # warm-up: buffers, caches
        await dlq.purge()
        gc.collect()
        start = rss_bytes()
        for _ in range(4):
            await batch(40)  # 80 MiB of oversized bodies and 40 deep ones per round
            await dlq.purge()
        gc.collect()
        grown = rss_bytes() - start
    await channel.close()
    reasons = Counter(e[2] for e in rec.events if e[0] == "dead_lettered")
    assert reasons == {"invalid": 180}
    print(f"RSS grew by {grown / 2**20:.1f} MiB over 160 messages (80 of 2 MiB)")
    assert grown < 48 * 1024 * 1024, f"RSS grew by {grown / 2**20:.0f} MiB over 160 messages"
