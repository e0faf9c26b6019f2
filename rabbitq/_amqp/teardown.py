"""Deleting an app's queues: ``rabbitq topology MODULE:APP --delete``.

The queues are the app's main queue, its retry queues, its DLQ, its registry of blocked
keys (``on_dead="block"``), the retry queues of delays it no longer uses (found as
:mod:`rabbitq._amqp.orphans` finds them), and the state queues the caller names (the
schedules' progress record, ``<queue>.schedules``: its one message is bookkeeping, not
work, so it never refuses the delete). A queue that holds messages or has consumers (a
worker running) is a refusal, and nothing is deleted, unless the caller forces it. The
exchange is deleted only if it exists and nothing is bound to it any more (the default
``rabbitq`` exchange is shared by every app).

Quorum queues refuse ``if-empty`` and ``if-unused`` on delete (RabbitMQ 3.10), so the
check is a passive declare just before; stop the app's workers and publishers first. The
decision is a pure function; :func:`delete` does the I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import aiormq
from aio_pika.abc import AbstractConnection

from . import orphans
from .topology import QueueDepth, Topology, queue_depths

STATE_KIND = "schedules"
"""The kind of a state queue: its messages are the app's bookkeeping, not work."""

ExchangeState = Literal["deleted", "kept", "missing", "exists", "not deleted"]
"""The app's exchange after :func:`delete`: ``deleted``; ``kept`` (other queues are bound
to it); ``missing`` (it did not exist); for a dry run or a refusal, ``exists`` or
``missing``; ``not deleted`` (an ``amq.*`` exchange, the broker's own)."""


@dataclass(frozen=True, kw_only=True)
class Teardown:
    """What :func:`delete` found and did."""

    queues: list[QueueDepth]  # the app's queues that existed, with their depth then
    deleted: bool  # False: refused, or a dry run
    exchange_deleted: bool = False
    exchange: ExchangeState = "missing"
    refusal: str = ""  # why nothing was (or would be) deleted ("" if it may be)


def busy(depths: Iterable[QueueDepth]) -> list[QueueDepth]:
    """The queues that hold messages or have consumers (pure); a state queue's messages
    (``kind == STATE_KIND``) do not count, its consumers do."""
    return [
        d for d in depths if d.exists and ((d.messages and d.kind != STATE_KIND) or d.consumers)
    ]


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
    state_queues: Iterable[str] = (),
    force: bool = False,
    dry_run: bool = False,
) -> Teardown:
    """Delete the app's queues (main, retry, DLQ, orphaned retry queues, the
    ``state_queues``; with partitions, every partition's) unless one holds messages or
    has consumers (``force`` deletes them all the same), then a partitioned app's
    consistent-hash exchange, then its exchange if it exists and nothing else is bound
    to it. ``dry_run`` only looks."""
    specs = topology.depth_specs()
    specs += [(name, STATE_KIND) for name in state_queues if name not in dict(specs)]
    declared = await queue_depths(connection, specs)
    found = await orphans.find(connection, topology, extra_ms)
    existing = [d for d in (*declared, *found) if d.exists]
    why = refusal(existing, force=force)
    transport = connection.transport
    if transport is None:
        raise RuntimeError("the connection is closed")
    amqp = transport.connection
    channel = await amqp.channel()
    own = bool(topology.exchange) and not topology.exchange.startswith("amq.")
    exchange: ExchangeState = "not deleted"
    try:
        if own:  # deleting a missing exchange succeeds: look first, to say so
            try:
                await channel.exchange_declare(topology.exchange, passive=True)
                exchange = "exists"
            except aiormq.exceptions.ChannelNotFoundEntity:
                exchange = "missing"
                channel = await amqp.channel()
        if dry_run or why:
            return Teardown(queues=existing, deleted=False, exchange=exchange, refusal=why)
        for depth in existing:  # the main queue first: nothing new is routed after it
            await channel.queue_delete(depth.name)
        if topology.partitioning is not None:  # its own; unbinds the app's exchange too
            await channel.exchange_delete(topology.partitioning.exchange)
        if exchange == "exists":
            try:
                await channel.exchange_delete(topology.exchange, if_unused=True)
                exchange = "deleted"
            except aiormq.exceptions.ChannelPreconditionFailed:  # other apps' bindings
                exchange = "kept"
                channel = await amqp.channel()
    finally:
        if not channel.is_closed:
            await channel.close()
    return Teardown(
        queues=existing, deleted=True, exchange_deleted=exchange == "deleted", exchange=exchange
    )
