"""The fence (I/O): a leader proves it still holds the schedules before every commit.

The exclusive lease queue is not enough in a partial partition: each side's Mnesia
removes the other side's queues, the lease among them, so two processes can hold it.
The progress record lives in a quorum queue, where every get, ack and requeue is a Raft
command applied in one order. Before each commit the leader takes the record back
(:func:`take_back`, unacked on its transaction's channel) and commits only if it is the
one it wrote last (:func:`rabbitq.schedule.plan.fence`); of two leaders, the one that
commits after the other finds the other's record and steps down without publishing. A
leader that lost it waits for the record to stand still (:func:`await_quiet`) before
it leads again. Why this holds: docs/schedules.md, "Through a network partition".
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

import aiormq
from aio_pika.abc import AbstractConnection
from pamqp.commands import Basic

from . import plan
from . import tick as tick_tx

RENEW = 1.0  # a leader commits at least this often, ticks due or not (renewing its hold)
# A scheduler that lost the fence to another leader leads again only once the record
# has stood still this long (its writer stopped renewing): no ping-pong of two leaders.
LEASE_PERIOD = 3.0
TIMEOUT = 5.0  # a read of the record must answer within this, or the leader steps down
TRIES = 5  # a record absent (another reader has it for a moment): looks, RETRY s apart
RETRY = 0.2
# At takeover, a record absent from an existing progress queue is waited for this long:
# a leader's commit in flight holds it until it completes or times out.
ABSENT_AT_TAKEOVER = tick_tx.COMMIT_TIMEOUT + 5.0


class LeaseLost(Exception):
    """The fence failed: another leader committed since this one's last commit
    (``taken``), or the record could not be taken back."""

    def __init__(self, message: str, *, taken: bool) -> None:
        super().__init__(message)
        self.taken = taken


async def take_back(
    tx: aiormq.abc.AbstractChannel, queue: str, *, leader: str, written: datetime
) -> int:
    """Get the progress record of ``queue`` (unacked, on the transaction's channel) and
    return its delivery tag if ``leader`` wrote it last (at ``written``); raise
    :class:`LeaseLost` otherwise (the record goes back when the channel closes)."""
    for _ in range(TRIES):
        async with asyncio.timeout(TIMEOUT):
            got = await tx.basic_get(queue, no_ack=False)
        if isinstance(got.delivery, Basic.GetOk):
            assert got.delivery.delivery_tag is not None
            record = plan.decode_progress(got.body)
            if plan.fence(record, leader=leader, written=written) == "held":
                return got.delivery.delivery_tag
            who = record.leader if record is not None and record.leader else "someone else"
            raise LeaseLost(f"{who} committed to {queue} since this leader", taken=True)
        await asyncio.sleep(RETRY)
    raise LeaseLost(f"the progress record of {queue} stayed away (held elsewhere)", taken=False)


async def progress_exists(connection: AbstractConnection, queue: str) -> bool:
    """Whether the progress queue exists already (a passive declare, on a channel of
    its own: a missing queue closes it). A new one has no record to wait for."""
    channel = await connection.channel(publisher_confirms=False)
    try:
        await channel.declare_queue(queue, passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        return False
    with contextlib.suppress(Exception):
        await channel.close()
    return True


async def await_quiet(connection: AbstractConnection, queue: str) -> None:
    """Watch the progress record (each read returned at once) until it has stood still
    for :data:`LEASE_PERIOD`: the leader that took the schedules stopped renewing."""
    loop = asyncio.get_running_loop()
    seen: object = object()
    since = loop.time()
    while True:
        channel = await connection.channel(publisher_confirms=False)
        underlay = await channel.get_underlay_channel()
        async with asyncio.timeout(TIMEOUT):
            found = await tick_tx.read_progress(underlay, queue)
        for tag in found.tags:
            await underlay.basic_reject(tag, requeue=True)
        await channel.close()
        writer = plan.writer_of(plan.merge(found.records) if found.records else None)
        now = loop.time()
        if writer != seen:
            seen, since = writer, now
        elif plan.lease_expired(since, now, LEASE_PERIOD):
            return
        await asyncio.sleep(RENEW / 2)


async def read_at_takeover(
    tx: aiormq.abc.AbstractChannel, queue: str, *, fresh: bool
) -> tick_tx.Found:
    """Every progress record, held until the first commit. An existing queue without
    one (``fresh`` false) is looked at again for up to :data:`ABSENT_AT_TAKEOVER`: a
    leader's commit in flight holds its record until it completes or fails."""
    deadline = asyncio.get_running_loop().time() + (0.0 if fresh else ABSENT_AT_TAKEOVER)
    while True:
        async with asyncio.timeout(TIMEOUT):
            found = await tick_tx.read_progress(tx, queue)
        if found.records or asyncio.get_running_loop().time() >= deadline:
            return found
        await asyncio.sleep(0.5)
