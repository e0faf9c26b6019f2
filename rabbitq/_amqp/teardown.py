"""Deleting an app's queues: ``rabbitq topology MODULE:APP --delete``.

The queues are the app's main queue, its retry queues, its DLQ, its registry of blocked
keys (``on_dead="block"``), and the retry queues of
delays it no longer uses (found as :mod:`rabbitq._amqp.orphans` finds them). A queue that
holds messages or has consumers (a worker running) is a refusal, and nothing is deleted,
unless the caller forces it. The exchange is deleted only if nothing is bound to it any
more (the default ``rabbitq`` exchange is shared by every app).

Quorum queues refuse ``if-empty`` and ``if-unused`` on delete (RabbitMQ 3.10), so the
check is a passive declare just before; stop the app's workers and publishers first. The
decision is a pure function; :func:`delete` does the I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import aiormq
from aio_pika.abc import AbstractConnection

from . import orphans
from .topology import QueueDepth, Topology, queue_depths


@dataclass(frozen=True, kw_only=True)
class Teardown:
    """What :func:`delete` found and did."""

    queues: list[QueueDepth]  # the app's queues that existed, with their depth then
    deleted: bool  # False: refused, or a dry run
    exchange_deleted: bool = False
    refusal: str = ""  # why nothing was deleted ("" if it was, or for a dry run)


def busy(depths: Iterable[QueueDepth]) -> list[QueueDepth]:
    """The queues that hold messages or have consumers (pure)."""
    return [d for d in depths if d.exists and (d.messages or d.consumers)]


def refusal(depths: Sequence[QueueDepth], *, force: bool) -> str:
    """Why the app's queues must not be deleted ("" if they may be) (pure)."""
    if force:
        return ""
    held = busy(depths)
    if not held:
        return ""
    listed = ", ".join(
        d.name
        + " ("
        + ", ".join(
            part
            for part in (
                f"{d.messages} message(s)" if d.messages else "",
                f"{d.consumers} consumer(s)" if d.consumers else "",
            )
            if part
        )
        + ")"
        for d in held
    )
    return (
        f"not deleting anything: {listed}; stop the app's workers, drain or export what "
        f"the queues hold (rabbitq dlq export QUEUE FILE), or add --force to delete them "
        f"with their messages"
    )


async def delete(
    connection: AbstractConnection,
    topology: Topology,
    *,
    extra_ms: Iterable[int] = (),
    force: bool = False,
    dry_run: bool = False,
) -> Teardown:
    """Delete the app's queues (main, retry, DLQ, orphaned retry queues; with partitions,
    every partition's) unless one holds messages or has consumers (``force`` deletes them
    all the same), then a partitioned app's consistent-hash exchange, then its exchange
    if nothing else is bound to it. ``dry_run`` only looks."""
    declared = await queue_depths(connection, topology.depth_specs())
    found = await orphans.find(connection, topology, extra_ms)
    existing = [d for d in (*declared, *found) if d.exists]
    why = refusal(existing, force=force)
    if dry_run or why:
        return Teardown(queues=existing, deleted=False, refusal=why)
    transport = connection.transport
    if transport is None:
        raise RuntimeError("the connection is closed")
    amqp = transport.connection
    channel = await amqp.channel()
    try:
        for depth in existing:  # the main queue first: nothing new is routed after it
            await channel.queue_delete(depth.name)
        exchange_deleted = False
        if topology.partitioning is not None:  # its own; unbinds the app's exchange too
            await channel.exchange_delete(topology.partitioning.exchange)
        if topology.exchange and not topology.exchange.startswith("amq."):
            try:
                await channel.exchange_delete(topology.exchange, if_unused=True)
                exchange_deleted = True
            except aiormq.exceptions.ChannelPreconditionFailed:  # other apps' bindings
                channel = await amqp.channel()
    finally:
        if not channel.is_closed:
            await channel.close()
    return Teardown(queues=existing, deleted=True, exchange_deleted=exchange_deleted)
