"""Poison input, without a broker: whatever a producer sends, the stage list decides ack,
retry or dead-letter with a reason, and never raises (property-based, hypothesis)."""

from __future__ import annotations

import datetime
import decimal

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rabbitq import App, Message, PermanentError
from rabbitq._amqp import headers as h
from rabbitq._worker import dispatch as dispatch_module
from rabbitq._worker.dispatch import new_job
from rabbitq._worker.stages import for_testing
from rabbitq.outcome import Ack, DeadLetter, Retry
from rabbitq.retry import _MAX_ATTEMPT, INVALID, REASONS, parse_attempt
from rabbitq.testing import FakeDelivery, deliver


class Order(Message, type="poison.order"):
    n: int
    note: str = ""


def make_app(**kwargs) -> App:
    app = App(queue="poison", **kwargs)

    @app.handler(Order)
    async def handle(msg: Order) -> None:
        if msg.note == "fail":
            raise RuntimeError("dependency down")
        if msg.note == "permanent":
            raise PermanentError("bad order")

    return app


APP = make_app()

# Any value a header can hold after decoding, and then some a buggy client may hand us.
header_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),  # negative, zero, huge
        st.floats(),
        st.text(max_size=30),
        st.binary(max_size=30),
        st.binary(max_size=30).map(bytearray),
        st.decimals(),
        st.datetimes(timezones=st.just(datetime.UTC)),
        st.sampled_from(["1", "2", " 3 ", "-1", "0", "99999999999999", "3.0", "²", "0x10"]),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)

json_bodies = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
).map(orjson.dumps)

bodies = st.one_of(
    st.binary(max_size=200),
    json_bodies,
    st.builds(
        # written by hand: orjson cannot write integers past 64 bits, other producers can
        lambda n, note: orjson.dumps({"note": note})[:-1] + b',"n":%d}' % n,
        st.integers(-(2**70), 2**70),
        st.sampled_from(["", "fail", "permanent", "x" * 5000]),
    ),
    st.integers(1, 100_000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.integers(1, 100_000).map(lambda depth: b'{"a":' * depth + b"1" + b"}" * depth),
    st.sampled_from([b"", b"\xef\xbb\xbf{}", b'{"n": 1, "n": 2}', b"NaN", b'{"n": 1e999}']),
)


@st.composite
def deliveries(draw: st.DrawFn) -> FakeDelivery:
    headers = draw(st.dictionaries(st.text(max_size=10), header_values, max_size=4))
    if draw(st.booleans()):
        headers[h.ATTEMPT] = draw(header_values)
    return FakeDelivery(
        body=draw(bodies),
        headers=headers,
        type=draw(st.one_of(st.none(), st.just("poison.order"), st.text(max_size=20))),
        routing_key=draw(st.one_of(st.none(), st.just("poison"), st.text(max_size=20))),
        message_id=draw(st.one_of(st.none(), st.text(max_size=40))),
        timestamp=draw(st.one_of(st.none(), st.datetimes(timezones=st.just(datetime.UTC)))),
    )


@settings(max_examples=400, deadline=None)
@given(deliveries())
async def test_any_delivery_ends_in_one_decision_with_a_bounded_error(delivery):
    pipeline = for_testing(APP.handlers.values(), middleware=())
    outcome = await pipeline.run(new_job(APP.handlers, APP.queue, delivery))
    assert 1 <= outcome.attempt <= _MAX_ATTEMPT
    decision = outcome.decision
    assert isinstance(decision, Ack | Retry | DeadLetter)
    if isinstance(decision, DeadLetter):
        assert decision.reason in REASONS
    if outcome.error is not None:
        assert len(outcome.error.encode()) <= h.MAX_ERROR_BYTES
    if outcome.traceback is not None:
        assert len(outcome.traceback.encode()) <= h.MAX_TRACEBACK_BYTES
    # and its copy's headers can be written
    h.dead_letter_headers(
        delivery.headers,
        reason="x",
        error=outcome.error or "",
        traceback=outcome.traceback,
        queue="q",
        attempt=outcome.attempt,
        exchange="",
        routing_key="",
    )


@settings(max_examples=300, deadline=None)
@given(header_values)
def test_any_attempt_header_reads_as_an_attempt_between_one_and_the_cap(value):
    assert 1 <= parse_attempt(value) <= _MAX_ATTEMPT


@pytest.mark.parametrize("depth", [1_000, 100_000])
async def test_deeply_nested_json_is_invalid_not_a_crash(depth):
    result = await deliver(APP, b"[" * depth + b"]" * depth, type="poison.order")
    assert result.dead_lettered and result.reason == INVALID


def test_the_default_maximum_body_size_is_four_mebibytes():
    assert APP.handlers["poison.order"].max_body_size == 4 * 1024 * 1024


async def test_a_body_over_the_maximum_is_invalid_and_never_parsed(monkeypatch):
    app = make_app(max_body_size=100)
    parsed: list[bytes] = []
    real = dispatch_module.decode_body
    monkeypatch.setattr(
        dispatch_module, "decode_body", lambda b, m: parsed.append(b) or real(b, m)
    )
    body = orjson.dumps({"n": 1, "note": "x" * 200})
    result = await deliver(app, body, type="poison.order")
    assert result.dead_lettered and result.reason == INVALID
    assert result.error == f"BodyTooLarge: body is {len(body)} bytes, above max_body_size 100"
    assert parsed == []


async def test_a_body_at_the_maximum_is_handled():
    body = orjson.dumps({"n": 1})
    result = await deliver(make_app(max_body_size=len(body)), body, type="poison.order")
    assert result.acked


async def test_a_handler_may_lift_the_apps_maximum_body_size():
    app = App(queue="poison", max_body_size=10)

    @app.handler(Order, max_body_size=None)
    async def handle(msg: Order) -> None:
        pass

    assert (await deliver(app, Order(n=1, note="y" * 100))).acked


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "1MiB"])
def test_a_maximum_body_size_that_is_not_positive_bytes_is_a_configuration_error(size):
    from rabbitq import ConfigurationError

    with pytest.raises(ConfigurationError, match="max_body_size"):
        App(queue="q", max_body_size=size)
    with pytest.raises(ConfigurationError, match="max_body_size"):
        App(queue="q").handler(Order, max_body_size=size)


def test_a_decimal_attempt_counts_as_the_first():
    assert parse_attempt(decimal.Decimal(3)) == 1
