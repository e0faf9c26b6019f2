"""The Consumer owns why the queue is paused and the readiness that follows, without a
broker: reasons cancel and restore the consumer, some keep the worker ready, some keep
it consuming, a failed consume is tried again, a cancelled consumer declares first."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from rabbitq._worker import consumer as c
from rabbitq._worker.consumer import (
    BREAKER_OPEN,
    BROKER_BLOCKED,
    COPIES_HELD,
    NOT_CONNECTED,
    NOT_CONSUMING,
    STARTING,
    STOPPING,
    Consumer,
    readiness,
)
from rabbitq.hooks import Hooks

HELD = "holding messages of q: q.dlq refused the copy (full: its length limit)"
BLOCKED = "broker blocked: memory alarm"


def test_readiness_follows_start_connection_reasons_and_the_consumer():
    def ready(reasons=None, *, started=True, connected=True, lost=False, live=True):
        return readiness(reasons or {}, started=started, connected=connected, lost=lost, live=live)

    assert ready(started=False) == STARTING
    assert ready() is None
    assert ready(connected=False) == NOT_CONNECTED
    assert ready(lost=True, live=False) == NOT_CONSUMING  # the broker cancelled it
    assert ready(live=False) == NOT_CONSUMING  # a reopened channel, not consumed on yet
    assert ready({STOPPING: NOT_CONSUMING}, live=False) == NOT_CONSUMING
    assert ready({COPIES_HELD: HELD}, live=False) == HELD
    assert ready({COPIES_HELD: HELD, BROKER_BLOCKED: BLOCKED}, live=False) == BLOCKED
    # an open breaker pauses a worker that is well: still ready
    assert ready({BREAKER_OPEN: "circuit breaker open for mail"}, live=False) is None
    assert ready({BREAKER_OPEN: "open", COPIES_HELD: HELD}, live=False) == HELD
    # a reason added by a later issue pauses and makes unready by default
    assert ready({"partition_lost": "partition lost"}, live=False) == "partition lost"


class Channel:
    """aiormq's channel, as far as the consumer uses it."""

    def __init__(self, fail_consumes: int = 0) -> None:
        self.calls: list[str] = []
        self.is_closed = False
        self.on_consumer_cancel_callbacks: set = set()
        self.fail_consumes = fail_consumes
        self.tags = 0

    async def basic_consume(self, queue, callback, arguments=None, consumer_tag=None):
        if self.fail_consumes:
            self.fail_consumes -= 1
            self.calls.append("consume failed")
            raise ConnectionError("channel is closing")
        self.tags += 1
        self.calls.append("consume")
        return SimpleNamespace(consumer_tag=f"ctag{self.tags}")

    async def basic_cancel(self, tag):
        self.calls.append(f"cancel {tag}")


class Robust:
    """aio-pika's robust channel, as far as the consumer uses it."""

    def __init__(self, underlay: Channel) -> None:
        self.underlay = underlay
        self.reopen_callbacks: set = set()

    async def get_underlay_channel(self):
        return self.underlay

    async def set_qos(self, prefetch_count):
        pass


class Connection:
    def __init__(self, channel: Robust) -> None:
        self._channel = channel

    async def channel(self, publisher_confirms):
        return self._channel


class Consuming(Hooks):
    def __init__(self) -> None:
        self.consuming: list[bool] = []

    def consuming_changed(self, queue: str, consuming: bool) -> None:
        self.consuming.append(consuming)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def started(underlay: Channel | None = None):
    underlay = underlay or Channel()
    hooks, redeclared = Consuming(), []

    async def redeclare(reason: str) -> None:
        redeclared.append(reason)

    def on_delivery(message) -> None: ...

    consumer = Consumer("q", on_delivery, hooks, redeclare=redeclare)
    await consumer.open(Connection(Robust(underlay)), 10)  # type: ignore[arg-type]
    assert consumer.health() == STARTING and not consumer.ready.is_set()
    await consumer.start()
    return consumer, underlay, hooks, redeclared


async def test_a_held_copy_pauses_and_makes_unready_until_resumed():
    consumer, underlay, hooks, _ = await started()
    assert consumer.health() is None and consumer.ready.is_set()
    consumer.pause(COPIES_HELD, HELD)
    await settle()
    assert underlay.calls == ["consume", "cancel ctag1"]
    assert consumer.health() == HELD and not consumer.ready.is_set()
    consumer.resume(COPIES_HELD)
    await settle()
    assert underlay.calls == ["consume", "cancel ctag1", "consume"]
    assert consumer.health() is None and consumer.ready.is_set()
    assert hooks.consuming == [True, False, True]


async def test_an_open_breaker_pauses_but_the_worker_stays_ready_and_consuming():
    consumer, underlay, hooks, _ = await started()
    consumer.pause(BREAKER_OPEN, "circuit breaker open for mail")
    await settle()
    assert underlay.calls == ["consume", "cancel ctag1"]
    assert consumer.health() is None and hooks.consuming == [True]
    consumer.resume(BREAKER_OPEN)
    await settle()
    assert underlay.calls[-1] == "consume"


async def test_a_blocked_broker_makes_unready_without_a_cancel():
    consumer, underlay, hooks, _ = await started()
    consumer.pause(BROKER_BLOCKED, BLOCKED)
    await settle()
    assert underlay.calls == ["consume"] and consumer.blocked
    assert consumer.health() == BLOCKED and hooks.consuming == [True]
    consumer.resume(BROKER_BLOCKED)
    assert consumer.health() is None


async def test_two_reasons_keep_it_paused_until_both_are_gone():
    consumer, underlay, _, _ = await started()
    consumer.pause(COPIES_HELD, HELD)
    consumer.pause(BREAKER_OPEN, "circuit breaker open for mail")
    await settle()
    consumer.resume(COPIES_HELD)
    await settle()
    assert underlay.calls == ["consume", "cancel ctag1"]
    assert consumer.health() is None  # only the breaker pauses it now
    consumer.resume(BREAKER_OPEN)
    await settle()
    assert underlay.calls[-1] == "consume"


async def test_a_consume_that_fails_is_tried_again(monkeypatch):
    monkeypatch.setattr(c, "RETRY_INTERVAL", 0.01)
    consumer, underlay, _, _ = await started()
    consumer.pause(COPIES_HELD, HELD)
    await settle()
    underlay.fail_consumes = 1
    consumer.resume(COPIES_HELD)
    for _ in range(100):
        if consumer.health() is None:
            break
        await asyncio.sleep(0.01)
    assert underlay.calls[-2:] == ["consume failed", "consume"]
    assert consumer.health() is None


async def test_the_broker_cancelling_it_declares_the_topology_again_then_consumes():
    consumer, underlay, hooks, redeclared = await started()
    (cancelled,) = underlay.on_consumer_cancel_callbacks
    cancelled(SimpleNamespace(consumer_tag="ctag1"))
    await settle()
    assert redeclared == ["consumer_cancelled"]
    assert underlay.calls == ["consume", "consume"] and consumer.health() is None
    assert hooks.consuming == [True, False, True]


async def test_a_reopened_channel_is_consumed_again_and_a_lost_connection_is_unready():
    consumer, underlay, hooks, _ = await started()
    consumer.connection_changed(False)
    underlay.is_closed = True
    assert consumer.health() == NOT_CONNECTED
    assert hooks.consuming == [True]  # it comes back by itself
    fresh = Channel()
    robust = consumer.channel
    assert robust is not None
    robust.underlay = fresh  # type: ignore[attr-defined]
    consumer.connection_changed(True)
    (reopened,) = robust.reopen_callbacks
    reopened(robust)
    await settle()
    assert fresh.calls == ["consume"] and consumer.health() is None
    assert hooks.consuming == [True]


async def test_stopping_cancels_for_good():
    consumer, underlay, hooks, _ = await started()
    await consumer.stop()
    assert consumer.stopping and underlay.calls == ["consume", "cancel ctag1"]
    assert consumer.health() == NOT_CONSUMING and hooks.consuming == [True, False]
    consumer.resume(STOPPING)
    consumer.resume(COPIES_HELD)
    await settle()
    assert underlay.calls == ["consume", "cancel ctag1"]
