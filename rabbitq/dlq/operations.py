"""Dead-letter queue operations that read the DLQ: list, show, replay and purge.

Every operation reads the DLQ the same way (:mod:`rabbitq.dlq.reader`): it consumes
*without acking*, up to the number of messages the queue held when it started, and at
the end closes its channel, so that the broker puts back every message it did not
remove. RabbitMQ returns them to their original positions, in order, for classic and
quorum queues alike (checked on 3.10). Two side effects are visible: those messages
are marked ``redelivered``, and on a quorum DLQ their ``x-delivery-count`` goes up by
one. rabbitq's DLQs have no delivery limit, so that count never dead-letters anything.

A message leaves the DLQ (replay, ``export --delete``, purge) only by an ack sent
after its copy is safe: confirmed by the broker (replay, import) or fsynced to disk
(export). If the connection drops, unacked messages go back to the DLQ; acks that
were sent but not yet known to be processed are counted as possible duplicates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import aiormq
from aio_pika.abc import AbstractConnection

from .._amqp import headers as h
from .._amqp.copy import Copy, replay_headers
from .._amqp.copy import replay as replay_copy
from ..errors import DlqError
from ..tracing.base import NO_SEND, NO_TRACING, SendSpan, Tracing
from .message import DeadMessage, Filters, resolve_dlq
from .mover import Mover, Pacer
from .reader import LostConnection, interrupted, session, user_of
from .tally import Progress, Tally

Gone = Sequence[tuple[Mapping[str, Any], str]]
"""The messages a purge deleted, as ``(headers, message_id)`` pairs."""
Released = Callable[[Gone], Awaitable[None]]
"""What a purge calls with the messages it deleted (:func:`purge`)."""

# Copies in flight (published, confirm not yet received) during replay and import.
DEFAULT_WINDOW = 256


async def list_messages(
    queue: str,
    *,
    url: str | None = None,
    filters: Filters | None = None,
    limit: int | None = None,
    connection: AbstractConnection | None = None,
) -> list[DeadMessage]:
    """The DLQ's messages that match ``filters``, oldest first, at most ``limit``.

    ``queue`` is a service queue (its DLQ is read) or a DLQ's name. The DLQ is left as it
    was (see the module's docstring).
    """
    found: list[DeadMessage] = []
    async with session("list", queue, url=url, filters=filters, connection=connection) as s:
        async for delivery in s.reader.deliveries():
            m = DeadMessage.from_delivery(delivery, s.dlq)
            if s.filters.matches(m):
                found.append(m)
                if limit is not None and len(found) >= limit:
                    break
    return found


async def show(
    queue: str,
    message_id: str,
    *,
    url: str | None = None,
    connection: AbstractConnection | None = None,
) -> list[DeadMessage]:
    """Every message in the DLQ with this ``message_id`` (usually one); the DLQ is left as
    it was. Raises :class:`DlqError` if there is none."""
    found = await list_messages(
        queue,
        url=url,
        filters=Filters(message_ids=frozenset({message_id})),
        connection=connection,
    )
    if not found:
        raise DlqError(
            f"no message with message_id {message_id!r} in {resolve_dlq(queue)!r} "
            f"(see 'rabbitq dlq list {queue}')"
        )
    return found


def _replay_span(tracing: Tracing, m: DeadMessage, copy: Copy, destination: str) -> SendSpan:
    """The replay's span (it writes the trace headers into the copy), or none."""
    if not tracing.enabled:
        return NO_SEND
    if copy.properties.headers is None:
        copy.properties.headers = {}
    return tracing.replay(
        copy.properties.headers,
        queue=destination,
        message_id=m.message_id or "",
        correlation_id=copy.properties.correlation_id,
    )


async def replay(
    queue: str,
    *,
    url: str | None = None,
    filters: Filters | None = None,
    limit: int | None = None,
    to: str | None = None,
    dry_run: bool = False,
    rate: float | None = None,
    window: int = DEFAULT_WINDOW,
    on_progress: Progress | None = None,
    connection: AbstractConnection | None = None,
    tracing: Tracing | None = None,
    unblock: bool = False,
) -> Tally:
    """Move matching DLQ messages back to the queue they failed in (or ``to``).

    Each copy goes through the default exchange to that queue only (mandatory), with
    :func:`~rabbitq.dlq.replay_headers`; its original is acked only after the broker
    confirmed the copy, ``window`` copies in flight at a time. Messages that do not
    match, or whose copy fails (no such queue), stay in the DLQ. ``dry_run`` moves
    nothing and lists in ``matched`` what would move. A lost connection raises
    :class:`DlqInterrupted` with the tally so far (see ``possible_duplicates``).
    ``tracing`` (e.g. the app's) makes a ``replay`` span per copy, in the message's trace.
    ``unblock``: each copy lifts its ordered key's block (``on_dead="block"``) even if it
    is not the message that blocked it (the operator's choice: docs/ordering.md).
    """
    tracing = tracing or NO_TRACING
    pacer = Pacer(rate)
    # (message_id, times replayed) of each copy this run sent. Two dead messages with
    # the same id are two messages and both move; only a copy of ours that died again
    # and came back during the run (its count one higher) is left for the next run.
    sent: set[tuple[str, int]] = set()
    selected = 0
    async with session(
        "replay", queue, url=url, filters=filters, connection=connection, dry_run=dry_run
    ) as s:
        tally, dlq, reader = s.tally, s.dlq, s.reader
        user = user_of(s.url)
        publish_channel = await s.connection.channel(publisher_confirms=True, on_return_raises=True)
        try:
            mover = Mover(reader, publish_channel, tally, window=window, on_progress=on_progress)
            try:
                async for delivery in reader.deliveries():
                    if mover.lost is not None:
                        break
                    m = DeadMessage.from_delivery(delivery, dlq)
                    tally.scanned += 1
                    if on_progress is not None:
                        on_progress(tally)
                    replayed = replay_headers(m.headers)[h.REPLAYED]  # its count + 1
                    if not s.filters.matches(m) or (m.message_id, replayed - 1) in sent:
                        tally.skipped += 1
                        continue
                    selected += 1
                    destination = to or m.origin
                    if destination is None or destination in mover.missing:
                        tally.fail(
                            "no rabbitq-queue header: give --to"
                            if destination is None
                            else f"queue {destination!r} does not exist"
                        )
                    elif dry_run:
                        tally.done += 1
                        tally.matched.append(m)
                    else:
                        await pacer.wait()
                        if m.message_id:
                            sent.add((m.message_id, replayed))
                        copy = replay_copy(m, user=user, unblock=unblock)
                        span = _replay_span(tracing, m, copy, destination)
                        await mover.submit(delivery, copy, destination, span)
                    if limit is not None and selected >= limit:
                        break
            except LostConnection as exc:
                mover.lost = mover.lost or exc.exc or exc
            await mover.finish()
            if mover.lost is not None:
                tally.possible_duplicates = mover.unsettled
                raise interrupted(tally, mover.lost, s.url)
        finally:
            if not publish_channel.is_closed:
                with contextlib.suppress(Exception):
                    await publish_channel.close()
            await tracing.flush()  # the status records of the replays (App(status=...))
    return tally


async def purge(
    queue: str,
    *,
    url: str | None = None,
    filters: Filters | None = None,
    limit: int | None = None,
    dry_run: bool = False,
    on_progress: Progress | None = None,
    connection: AbstractConnection | None = None,
    tracing: Tracing | None = None,
    released: Sequence[Released] = (),
) -> Tally:
    """Delete the DLQ messages that match ``filters`` (all of them without filters), at
    most ``limit``; the others stay, in order. ``dry_run`` deletes nothing and counts
    what would go. ``tracing`` (e.g. the app's) is told of each message deleted (its
    status becomes ``purged`` with ``App(status=...)``). Each of ``released`` is called once
    the deletions are settled, with every message deleted (its headers and id): what the
    app keeps elsewhere for them goes too (a large payload's blob,
    :func:`~rabbitq.payloads.steps.blobs_released`; its unique and debounce keys,
    :func:`~rabbitq.unique.release.keys_released`)."""
    tracing = tracing or NO_TRACING
    gone: list[tuple[Mapping[str, Any], str]] = []
    async with session(
        "purge",
        queue,
        url=url,
        filters=filters,
        connection=connection,
        dry_run=dry_run,
        also_lost=(aiormq.exceptions.AMQPError, ConnectionError),
    ) as s:
        tally, reader = s.tally, s.reader
        async for delivery in reader.deliveries():
            m = DeadMessage.from_delivery(delivery, s.dlq)
            tally.scanned += 1
            if not s.filters.matches(m):
                tally.skipped += 1
                continue
            if not dry_run:
                await reader.ack(delivery)
                tracing.purged(queue=s.dlq, message_id=m.message_id or "")
                if released:
                    gone.append((m.headers, m.message_id or ""))
            tally.done += 1
            if on_progress is not None:
                on_progress(tally)
            if limit is not None and tally.done >= limit:
                break
        if not dry_run:
            await reader.settled()  # every ack has been processed
    for release in released if gone else ():
        await release(gone)
    await tracing.flush()
    return tally
