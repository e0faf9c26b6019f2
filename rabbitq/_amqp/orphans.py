"""Retry queues an app no longer uses: found, reported, and deleted when empty.

Changing ``delays=(1, ...)`` to ``(2, ...)`` makes the app declare ``emails.retry.2s``;
``emails.retry.1s`` stays on the broker. Its messages still come back to ``emails``
when their TTL runs out (nothing is lost), but nobody would be told that it exists.
The worker and ``rabbitq topology`` warn about such queues, with their depth, and
``rabbitq topology --prune`` deletes those that are empty.

AMQP cannot list queues, so the candidates are the retry queues of common delays
(:data:`COMMON_DELAYS_MS`, the default policy's among them) plus any delays the caller
names, each probed with a passive declare. The decisions are pure functions; the two
coroutines at the end do the I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import aiormq
from aio_pika.abc import AbstractConnection

from ..retry import RetryPolicy
from .topology import QueueDepth, Topology, delay_label, retry_queue_name

_S, _M, _H = 1_000, 60_000, 3_600_000
COMMON_DELAYS_MS: tuple[int, ...] = tuple(
    sorted(
        {
            100,
            250,
            500,
            *(s * _S for s in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 30, 45, 90)),
            *(m * _M for m in (1, 2, 3, 4, 5, 10, 15, 20, 30, 45)),
            *(h * _H for h in (1, 2, 3, 4, 6, 8, 12, 24)),
            *RetryPolicy().delays_ms,
        }
    )
)
"""Delays whose retry queues are looked for (100ms ... 24h, the default policy's too)."""


@dataclass(frozen=True, kw_only=True)
class Pruned:
    """What ``prune`` did with one orphaned retry queue."""

    name: str
    deleted: bool
    messages: int  # its depth when it was kept
    consumers: int = 0  # its consumers when it was kept


def candidates(topology: Topology, extra_ms: Iterable[int] = ()) -> list[str]:
    """Names of retry queues that may exist for this app but that it does not declare."""
    declared = {q.name for q in topology.retries}
    names = {retry_queue_name(topology.main.name, ms) for ms in (*COMMON_DELAYS_MS, *extra_ms)}
    return sorted(names - declared)


def orphaned(topology: Topology, depths: Iterable[QueueDepth]) -> list[QueueDepth]:
    """The queues among ``depths`` that exist, are retry queues of this app's queue by
    name, and are not among the retry queues it declares."""
    prefix = f"{topology.main.name}.retry."
    declared = {q.name for q in topology.retries}
    return [d for d in depths if d.exists and d.name.startswith(prefix) and d.name not in declared]


def warning(topology: Topology, orphans: Sequence[QueueDepth], *, app_spec: str = "") -> str:
    """One line naming each orphaned retry queue and its depth, and what to do ("" if none)."""
    if not orphans:
        return ""
    listed = ", ".join(f"{d.name} ({_messages(d.messages)})" for d in orphans)
    used = ", ".join(delay_label(q.ttl_ms or 0) for q in topology.retries) or "none"
    waiting = sum(d.messages for d in orphans)
    fate = (
        f"the {_messages(waiting)} in them will still come back to {topology.main.name!r}; "
        if waiting
        else ""
    )
    spec = app_spec or "MODULE:APP"
    return (
        f"retry queue(s) no handler uses any more (this app's delays: {used}): {listed}; "
        f"{fate}delete the empty ones with 'rabbitq topology {spec} --prune'"
    )


def _messages(n: int) -> str:
    return f"{n} message{'' if n == 1 else 's'}"


async def find(
    connection: AbstractConnection, topology: Topology, extra_ms: Iterable[int] = ()
) -> list[QueueDepth]:
    """The orphaned retry queues of ``topology`` on the broker, with their depth.

    Probes on the underlying aiormq connection: a robust channel closed by a missing
    queue would reopen itself in the background, once per probe.
    """
    names = candidates(topology, extra_ms)
    transport = connection.transport
    if transport is None:
        raise RuntimeError("the connection is closed")
    amqp = transport.connection
    channel = await amqp.channel()
    depths: list[QueueDepth] = []
    try:
        for name in names:
            try:
                ok = await channel.queue_declare(name, passive=True)
            except aiormq.exceptions.ChannelNotFoundEntity:
                channel = await amqp.channel()
                continue
            depths.append(
                QueueDepth(
                    name=name,
                    kind="retry",
                    exists=True,
                    messages=ok.message_count or 0,
                    consumers=ok.consumer_count or 0,
                )
            )
    finally:
        if not channel.is_closed:
            await channel.close()
    return orphaned(topology, depths)


async def prune(connection: AbstractConnection, orphans: Iterable[QueueDepth]) -> list[Pruned]:
    """Delete each orphaned retry queue that is empty and unused; keep the others.

    A passive declare says whether the queue holds messages or has consumers right now,
    and only a queue with neither is deleted, at once. The delete carries no
    ``if_empty``/``if_unused``: quorum queues refuse both (``NOT_IMPLEMENTED``, which
    closes the whole connection). Nothing publishes to an orphaned retry queue but a
    worker that still runs the old delays, so stop those before pruning: a copy one of
    them sent in the instant between the check and the delete would go with the queue.
    """
    transport = connection.transport
    if transport is None:
        raise RuntimeError("the connection is closed")
    amqp = transport.connection
    channel = await amqp.channel()
    done: list[Pruned] = []
    try:
        for orphan in orphans:
            try:
                ok = await channel.queue_declare(orphan.name, passive=True)
            except aiormq.exceptions.ChannelNotFoundEntity:
                channel = await amqp.channel()
                continue  # already gone
            now = QueueDepth(
                name=orphan.name,
                kind=orphan.kind,
                exists=True,
                messages=ok.message_count or 0,
                consumers=ok.consumer_count or 0,
            )
            if not deletable(now):
                done.append(_kept(now))
                continue
            await channel.queue_delete(orphan.name)
            done.append(Pruned(name=orphan.name, deleted=True, messages=0))
    finally:
        if not channel.is_closed:
            await channel.close()
    return done


def deletable(depth: QueueDepth) -> bool:
    """Whether ``prune`` may delete this queue: it exists, holds no message and has no
    consumer (pure)."""
    return depth.exists and depth.messages == 0 and depth.consumers == 0


def _kept(depth: QueueDepth) -> Pruned:
    return Pruned(
        name=depth.name, deleted=False, messages=depth.messages, consumers=depth.consumers
    )


async def report(
    connection: AbstractConnection,
    topology: Topology,
    logger: logging.Logger,
    *,
    app_spec: str | None = None,
) -> list[QueueDepth]:
    """Find the orphaned retry queues and log one warning about them (none if there are
    none), naming the app as ``app_spec`` in the command to run. A failure to look is
    logged and ignored: it must not stop a worker."""
    try:
        found = await find(connection, topology)
    except (aiormq.exceptions.AMQPError, ConnectionError, RuntimeError) as exc:
        logger.debug("could not look for orphaned retry queues: %s", exc)
        return []
    if found:
        logger.warning("%s", warning(topology, found, app_spec=app_spec or ""))
    return found
