"""Ack coalescing: the ledger's bookkeeping (pure) and the Acker's ordering of frames
(against a recording stand-in for aiormq's channel; no broker)."""

from __future__ import annotations

import asyncio

import pytest

from rabbitq._worker.acks import Acker, AckLedger

WAIT = 0.02


def test_a_contiguous_run_of_done_deliveries_is_one_multiple_ack():
    ledger = AckLedger()
    for tag in (1, 2, 3):
        ledger.done(tag, now=0)
    plan = ledger.plan(now=0, max_wait=WAIT)
    assert (plan.multiple, plan.run, plan.singles) == (3, [1, 2, 3], [])
    assert ledger.base == 3 and ledger.pending == 0
    assert not ledger.plan(now=1, max_wait=WAIT)


def test_a_multiple_ack_never_crosses_a_delivery_still_running_or_not_seen():
    ledger = AckLedger()
    ledger.done(1, now=0)
    ledger.done(2, now=0)
    ledger.done(4, now=0)  # 3 is still in its handler (or not seen yet)
    plan = ledger.plan(now=0, max_wait=WAIT)
    assert (plan.multiple, plan.run, plan.singles) == (2, [1, 2], [])
    assert ledger.pending == 1


def test_a_delivery_waiting_above_a_gap_is_acked_alone_after_max_wait():
    ledger = AckLedger()
    ledger.done(2, now=0)
    assert not ledger.plan(now=0.001, max_wait=WAIT)
    plan = ledger.plan(now=WAIT, max_wait=WAIT)
    assert (plan.multiple, plan.singles) == (None, [2])
    # When the gap closes, the run goes past 2 (already acked) without acking it again.
    ledger.done(1, now=1)
    ledger.done(3, now=1)
    plan = ledger.plan(now=1, max_wait=WAIT)
    assert (plan.multiple, plan.run, plan.singles) == (3, [1, 3], [])
    assert ledger.base == 3


def test_a_nacked_delivery_is_never_part_of_a_multiple_ack():
    ledger = AckLedger()
    ledger.done(1, now=0)
    ledger.settled(2)  # nacked alone
    ledger.done(3, now=0)
    plan = ledger.plan(now=0, max_wait=WAIT)
    # multiple-ack 3 acks 1 and 3: 2 is no longer unacked at the broker
    assert (plan.multiple, plan.run) == (3, [1, 3])


def test_a_run_that_ends_with_a_nack_acks_through_the_last_done_tag_only():
    ledger = AckLedger()
    ledger.done(1, now=0)
    ledger.settled(2)
    plan = ledger.plan(now=0, max_wait=WAIT)
    assert plan.multiple == 1  # never the nacked tag: the broker would refuse it
    assert ledger.base == 2


def test_only_nacked_deliveries_need_no_ack():
    ledger = AckLedger()
    ledger.settled(1)
    assert not ledger.plan(now=0, max_wait=WAIT)
    assert ledger.base == 1


def test_everything_acks_what_waits_above_a_gap_at_once():
    ledger = AckLedger()
    ledger.done(2, now=0)
    ledger.done(5, now=0)
    plan = ledger.plan(now=0, max_wait=WAIT, everything=True)
    assert (plan.multiple, plan.singles) == (None, [2, 5])


@pytest.mark.parametrize("second", ["done", "settled"])
def test_settling_a_delivery_twice_is_refused(second):
    ledger = AckLedger()
    ledger.done(1, now=0)
    with pytest.raises(ValueError, match="already settled"):
        getattr(ledger, second)(1, *([0] if second == "done" else []))
    ledger.plan(now=0, max_wait=WAIT)
    with pytest.raises(ValueError, match="already settled"):
        ledger.settled(1)


class RecordingChannel:
    """Records ack/nack frames in order; a nack can be held to simulate a slow write."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, int, bool]] = []
        self.hold_nack = asyncio.Event()
        self.hold_nack.set()
        self.closed = False

    async def basic_ack(self, delivery_tag: int, multiple: bool = False) -> None:
        if self.closed:
            raise RuntimeError("channel closed")
        self.frames.append(("ack", delivery_tag, multiple))
        await asyncio.sleep(0)

    async def basic_nack(self, delivery_tag: int, multiple: bool, requeue: bool) -> None:
        assert requeue and not multiple
        await self.hold_nack.wait()
        self.frames.append(("nack", delivery_tag, multiple))

    async def basic_reject(self, delivery_tag: int, requeue: bool) -> None:
        assert requeue
        self.frames.append(("reject", delivery_tag, False))


def covered(frames: list[tuple[str, int, bool]], tag: int) -> list[tuple[str, int, bool]]:
    """The frames that settle ``tag`` (a multiple-ack covers every tag up to its own)."""
    return [f for f in frames if f[1] == tag or (f[0] == "ack" and f[2] and f[1] > tag)]


async def test_acks_are_coalesced_and_after_runs_once_each_ack_is_written():
    channel = RecordingChannel()
    acker = Acker(channel, batch=4, delay=0.01)  # type: ignore[arg-type]
    written: list[int] = []
    for tag in range(1, 9):
        acker.ack(tag, lambda tag=tag: written.append(tag))
    await acker.flush()
    assert all(multiple for _, _, multiple in channel.frames)
    assert len(channel.frames) < 8
    assert channel.frames[-1][1] == 8
    assert sorted(written) == list(range(1, 9))


async def test_a_nack_in_progress_is_never_overtaken_by_a_multiple_ack():
    channel = RecordingChannel()
    acker = Acker(channel, batch=1, delay=0.001)  # type: ignore[arg-type]
    acker.ack(1)
    channel.hold_nack.clear()
    nack = asyncio.create_task(acker.nack(2))
    for tag in (3, 4):
        acker.ack(tag)
    await asyncio.sleep(0.05)  # the acks of 3 and 4 wait (alone at most) while 2 is held
    assert not any(f[0] == "ack" and f[2] and f[1] >= 2 for f in channel.frames)
    channel.hold_nack.set()
    assert await nack
    await acker.flush()
    assert covered(channel.frames, 2) == [("nack", 2, False)]
    for tag in (1, 3, 4):
        assert len([f for f in covered(channel.frames, tag) if f[0] == "ack"]) >= 1
    # nothing is acked twice by a single ack, and no ack ever names the nacked tag
    assert ("ack", 2, False) not in channel.frames and ("ack", 2, True) not in channel.frames


async def test_acks_that_cannot_be_written_skip_after_and_do_not_stop_the_acker():
    channel = RecordingChannel()
    acker = Acker(channel, batch=1)  # type: ignore[arg-type]
    channel.closed = True
    called: list[int] = []
    acker.ack(1, lambda: called.append(1))
    await acker.flush()
    assert called == []
    channel.closed = False
    acker.ack(2, lambda: called.append(2))
    await acker.flush()
    assert called == [2]


async def test_without_coalescing_every_delivery_is_acked_alone():
    channel = RecordingChannel()
    acker = Acker(channel, coalesce=False)  # type: ignore[arg-type]
    for tag in (1, 2, 3):
        acker.ack(tag)
    await asyncio.sleep(0.01)
    await acker.flush()
    assert channel.frames == [("ack", 1, False), ("ack", 2, False), ("ack", 3, False)]


def test_without_multiple_every_done_delivery_is_planned_alone():
    ledger = AckLedger()
    for tag in (1, 2, 4):
        ledger.done(tag, now=0)
    plan = ledger.plan(now=0, max_wait=WAIT, everything=True, multiple=False)
    assert (plan.multiple, plan.singles) == (None, [1, 2, 4])


async def test_a_reject_returns_the_delivery_and_is_never_part_of_a_multiple_ack():
    # basic.reject, not basic.nack, where a failure must raise a quorum queue's delivery
    # count: RabbitMQ 4.3 counts rejects only (rabbitq._amqp.brokers)
    channel = RecordingChannel()
    acker = Acker(channel, batch=1, delay=0.001)  # type: ignore[arg-type]
    acker.ack(1)
    assert await acker.reject(2)
    acker.ack(3)
    await acker.flush()
    frames = channel.frames
    assert frames.count(("reject", 2, False)) == 1
    # a multiple-ack through 3 may follow (2 is settled at the broker), never precede it
    assert covered(frames, 2)[0] == ("reject", 2, False)
