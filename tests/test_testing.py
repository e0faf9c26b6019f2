"""rabbitq.testing: the worker's decision for one message, without a broker."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from rabbitq import App, Context, Message, PermanentError, RetryPolicy
from rabbitq.testing import deliver, deliver_sync


class Charge(Message, type="unit.testing.charge"):
    amount: int


class Notify(Message, type="unit.testing.notify"):
    text: str


class Stranger(Message, type="unit.testing.stranger"):
    pass


class CardDeclined(PermanentError):
    pass


def make_app(**kwargs: Any) -> tuple[App, list[tuple[Charge, Context]]]:
    """An app whose charge handler fails while ``amount`` is negative; records contexts."""
    app = App(queue="unit-testing", retry=RetryPolicy(delays=(1, 10, 60)), **kwargs)
    seen: list[tuple[Charge, Context]] = []

    @app.handler(Charge)
    async def charge(msg: Charge, ctx: Context) -> None:
        seen.append((msg, ctx))
        if msg.amount == -1:
            raise CardDeclined("card declined")
        if msg.amount < 0:
            raise ConnectionError("provider down")

    return app, seen


async def test_a_handler_that_returns_is_acked():
    app, seen = make_app()
    result = await deliver(app, Charge(amount=5))
    assert result.acked
    assert (result.outcome, result.type_name, result.attempt) == ("ack", "unit.testing.charge", 1)
    assert not result.retried and not result.dead_lettered
    assert result.error is None
    assert seen[0][0] == Charge(amount=5)


async def test_the_handler_gets_a_context_describing_the_delivery():
    app, seen = make_app()
    await deliver(
        app,
        Charge(amount=5),
        message_id="m-1",
        correlation_id="c-1",
        headers={"tenant": "acme"},
        redelivered=True,
        attempt=2,
    )
    ctx = seen[0][1]
    assert ctx.message_id == "m-1"
    assert ctx.correlation_id == "c-1"
    assert ctx.attempt == 2
    assert ctx.max_attempts == 4
    assert ctx.redelivered is True
    assert ctx.headers["tenant"] == "acme"
    assert ctx.queue == "unit-testing"
    assert ctx.type == "unit.testing.charge"
    assert ctx.timestamp is not None


async def test_each_message_gets_its_own_message_id_unless_given():
    app, seen = make_app()
    await deliver(app, Charge(amount=1))
    await deliver(app, Charge(amount=1))
    first, second = (ctx.message_id for _, ctx in seen)
    assert first and second and first != second


@pytest.mark.parametrize(("attempt", "tier", "delay"), [(1, 1, "1s"), (2, 2, "10s"), (3, 3, "1m")])
async def test_a_failed_attempt_is_retried_in_the_tier_of_its_number(attempt, tier, delay):
    app, _ = make_app()
    result = await deliver(app, Charge(amount=-2), attempt=attempt)
    assert result.retried
    assert (result.tier, result.delay, result.next_attempt) == (tier, delay, attempt + 1)
    assert result.attempt == attempt
    assert result.error == "ConnectionError: provider down"
    assert result.reason is None


async def test_the_last_failed_attempt_is_dead_lettered_as_exhausted():
    app, _ = make_app()
    result = await deliver(app, Charge(amount=-2), attempt=4)
    assert result.dead_lettered
    assert result.reason == "exhausted"
    assert result.error == "ConnectionError: provider down"
    assert result.delay is None and result.tier is None


async def test_a_permanent_error_is_dead_lettered_on_the_first_attempt():
    app, _ = make_app()
    result = await deliver(app, Charge(amount=-1))
    assert result.dead_lettered
    assert result.reason == "permanent"
    assert result.error == "CardDeclined: card declined"


async def test_a_handlers_own_retry_policy_decides_its_tiers():
    app = App(queue="unit-testing")

    @app.handler(Notify, retry=RetryPolicy(delays=(0.5, 90)))
    async def notify(msg: Notify) -> None:
        raise RuntimeError("smtp down")

    assert (await deliver(app, Notify(text="x"))).delay == "500ms"
    assert (await deliver(app, Notify(text="x"), attempt=2)).delay == "90s"
    assert (await deliver(app, Notify(text="x"), attempt=3)).reason == "exhausted"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"not json", "DecodeError: body is not JSON"),
        (b"[1, 2]", "DecodeError: body is JSON list, expected an object"),
        (b'{"amount": "lots"}', "DecodeError: unit.testing.charge failed validation: amount"),
        (b"{}", "DecodeError: unit.testing.charge failed validation: amount: Field required"),
    ],
)
async def test_a_body_that_is_not_a_valid_message_is_dead_lettered_as_invalid(body, error):
    app, seen = make_app()
    result = await deliver(app, body, type="unit.testing.charge")
    assert result.dead_lettered
    assert result.reason == "invalid"
    assert result.type_name == "unit.testing.charge"
    assert result.error is not None and result.error.startswith(error)
    assert seen == []


async def test_invalid_input_is_never_retried_whatever_the_attempt():
    app, _ = make_app()
    result = await deliver(app, b"garbage", type="unit.testing.charge", attempt=2)
    assert result.dead_lettered and result.reason == "invalid"


async def test_a_type_no_handler_knows_is_dead_lettered_as_unknown_type():
    app, _ = make_app()
    result = await deliver(app, Stranger())
    assert result.dead_lettered
    assert result.reason == "unknown-type"
    assert result.type_name == "unknown"
    assert "no handler for type 'unit.testing.stranger'" in (result.error or "")


async def test_bytes_without_a_type_are_an_unknown_type():
    app, _ = make_app()
    result = await deliver(app, b'{"amount": 1}')
    assert result.dead_lettered and result.reason == "unknown-type"


async def test_a_handler_that_runs_past_its_timeout_is_a_failed_attempt():
    app = App(queue="unit-testing", retry=RetryPolicy(delays=(1,)))

    @app.handler(Notify, timeout=0.05)
    async def notify(msg: Notify) -> None:
        await asyncio.sleep(10)

    started = time.monotonic()
    result = await deliver(app, Notify(text="slow"))
    assert time.monotonic() - started < 5
    assert result.retried and result.delay == "1s"
    assert result.error == "HandlerTimeout: handler exceeded its timeout of 0.05s"


async def test_a_timeout_error_raised_by_the_handler_itself_is_reported_as_it_is():
    app = App(queue="unit-testing", retry=RetryPolicy(delays=(1,)))

    @app.handler(Notify)
    async def notify(msg: Notify) -> None:
        raise TimeoutError("upstream timed out")

    result = await deliver(app, Notify(text="x"))
    assert result.retried
    assert result.error == "TimeoutError: upstream timed out"


async def test_a_sync_handler_runs_in_a_thread():
    app = App(queue="unit-testing")
    threads: list[int] = []

    @app.handler(Notify)
    def notify(msg: Notify, ctx: Context) -> None:
        threads.append(threading.get_ident())
        if msg.text == "fail":
            raise ValueError("bad text")

    assert (await deliver(app, Notify(text="ok"))).acked
    assert threads and threads[0] != threading.get_ident()
    failed = await deliver(app, Notify(text="fail"))
    assert failed.retried and failed.error == "ValueError: bad text"


async def test_a_callable_object_with_an_async_call_is_awaited():
    app = App(queue="unit-testing")

    class Handler:
        def __init__(self) -> None:
            self.calls = 0

        async def __call__(self, msg: Notify) -> None:
            self.calls += 1
            raise RuntimeError("failed inside the coroutine")

    handler = Handler()
    app.handler(Notify)(handler)
    result = await deliver(app, Notify(text="x"))
    assert handler.calls == 1
    assert result.retried
    assert result.error == "RuntimeError: failed inside the coroutine"


def test_deliver_sync_works_without_an_event_loop():
    app, _ = make_app()
    assert deliver_sync(app, Charge(amount=1)).acked
    result = deliver_sync(app, Charge(amount=-2), attempt=2)
    assert result.retried and result.delay == "10s"
    assert deliver_sync(app, b"{", type="unit.testing.charge").reason == "invalid"


async def test_a_handler_that_swallows_its_timeout_cancellation_returns_normally():
    app = App(queue="t.swallow", timeout=0.01)

    @app.handler(TimeoutProbe)
    async def swallow(msg: TimeoutProbe) -> None:
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            pass  # a handler that ignores cancellation, as asyncio.timeout also allows

    result = await deliver(app, TimeoutProbe())
    assert result.acked
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)  # no cancellation of ours is left pending on this task


class TimeoutProbe(Message, type="test.testing.timeout-probe"):
    pass


# -- effects: follow-ups and idempotency through deliver -----------------------------------


class Bill(Message, type="testing.bill"):
    n: int
    fail: bool = False


class Billed(Message, type="testing.billed"):
    n: int


async def test_deliver_returns_the_follow_ups_of_a_success_and_none_of_a_failure():
    app = App(queue="testing.effects", retry=RetryPolicy(delays=(1,)))

    @app.handler(Bill)
    async def charge(msg: Bill, ctx: Context) -> None:
        await ctx.publish(Billed(n=msg.n))
        if msg.fail:
            raise RuntimeError("declined after publishing")

    ok = await deliver(app, Bill(n=1), message_id="m-1", correlation_id="c-1")
    failed = await deliver(app, Bill(n=2, fail=True))

    assert ok.acked and ok.messages == [Billed(n=1)]
    (follow_up,) = ok.published
    assert follow_up.correlation_id == "c-1"
    assert follow_up.headers["rabbitq-causation-id"] == "m-1"
    assert failed.retried and failed.published == ()


@pytest.mark.services  # the real Redis
async def test_deliver_with_a_real_store_reports_the_second_delivery_as_a_duplicate():
    import uuid

    from rabbitq.effects import RedisStore

    store = RedisStore(key_prefix=f"t:{uuid.uuid4().hex[:10]}:", retention=30)
    app = App(queue="testing.effects", idempotency=store)
    calls = []

    @app.handler(Bill, key=lambda m: m.n)
    async def charge(msg: Bill, ctx: Context) -> None:
        calls.append(ctx.idempotency_key)

    try:
        first = await deliver(app, Bill(n=7), message_id="a")
        second = await deliver(app, Bill(n=7), message_id="b")  # same business key
    finally:
        await store.close()
    assert first.acked and not first.duplicate
    assert second.acked and second.duplicate
    assert calls == ["7"]
