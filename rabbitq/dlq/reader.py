"""Reading a DLQ without removing anything, and the preamble every operation shares.

:class:`Reader` consumes *without acking*, up to the number of messages the queue held
when it started (a new arrival never makes it run forever), and at the end closes its
channel, so that the broker puts back every message it did not remove. :func:`session`
is the rest of what list, replay, purge and export begin with.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

from .._amqp.connection import connect_once
from ..errors import DlqError, DlqInterrupted
from ..settings import redact_url, resolve_url
from .message import Filters, resolve_dlq
from .tally import Tally

# AMQP's prefetch count is 16 bits; a larger DLQ is read with no prefetch limit.
MAX_PREFETCH = 65535
# With nothing delivered for this long, ask the broker whether anything is left.
IDLE = 0.5
# How long leaving a read waits for the broker to put back what it held.
PUT_BACK_WAIT = 2.0


class Lost:
    """Put on the delivery queue when the channel closes."""

    def __init__(self, exc: BaseException | None) -> None:
        self.exc = exc


class Reader:
    """Consumes a queue without acking, up to the messages it held at the start.

    Leaving the block closes the channel: the broker requeues every delivery that was
    not acked, in its original place.
    """

    def __init__(self, connection: AbstractConnection, queue: str, url: str) -> None:
        self.connection = connection
        self.queue = queue
        self.url = url
        self.total = 0
        self.other_consumers = 0
        self.lost: BaseException | None = None
        # Called when the channel closes: aiormq can leave a write pending forever on a
        # dead connection, so whoever waits on one must be woken up.
        self.on_lost: list[Callable[[], None]] = []
        self.channel: AbstractChannel | None = None
        self._inbox: asyncio.Queue[AbstractIncomingMessage | Lost] = asyncio.Queue()
        self._received = 0  # deliveries the broker handed this reader
        self._acked = 0  # of which acked (removed)

    async def __aenter__(self) -> Reader:
        self.channel = await self.connection.channel(publisher_confirms=False)
        self.channel.close_callbacks.add(self._on_close)
        declared = await self._declare()
        self.total = declared.message_count or 0
        # Messages held (unacked) by another consumer are not ready, so this run cannot
        # see them: often an interrupted run whose connection the broker has not yet
        # closed. Its messages return to the DLQ when it does.
        self.other_consumers = declared.consumer_count or 0
        if self.total:
            prefetch = self.total if self.total <= MAX_PREFETCH else 0
            await self.channel.set_qos(prefetch_count=prefetch)
            queue = await self.channel.get_queue(self.queue, ensure=False)
            await queue.consume(self._on_message, no_ack=False)
        return self

    async def ack(self, delivery: AbstractIncomingMessage) -> None:
        """Hand the ack to the connection without waiting for the socket (a dead
        connection could keep that wait pending forever); :meth:`settled` proves later
        that the queue processed it."""
        if self.lost is not None:
            raise LostConnection(self.lost)
        assert delivery.delivery_tag is not None
        await delivery.channel.basic_ack(delivery.delivery_tag, wait=False)
        self._acked += 1

    async def __aexit__(self, *exc: object) -> None:
        self.on_lost.clear()
        channel, self.channel = self.channel, None
        if channel is not None and not channel.is_closed:
            healthy = self.lost is None
            with contextlib.suppress(Exception):
                await channel.close()
            if healthy and self._received > self._acked:
                await self._until_put_back(self.total - self._acked)

    async def _until_put_back(self, expected: int) -> None:
        """Wait (at most :data:`PUT_BACK_WAIT`) until the queue holds ``expected``
        messages again: the broker puts back what a closed channel held *after* it
        answers the close, so an operation run right after (a ``list`` then a
        ``replay``) could find the queue empty (seen under load on 3.10). Best effort:
        another consumer taking messages meanwhile only makes this wait run out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PUT_BACK_WAIT
        with contextlib.suppress(Exception):
            channel = await self.connection.channel(publisher_confirms=False)
            try:
                while loop.time() < deadline:
                    queue = await channel.declare_queue(self.queue, passive=True)
                    if (queue.declaration_result.message_count or 0) >= expected:
                        return
                    await asyncio.sleep(0.02)
            finally:
                with contextlib.suppress(Exception):
                    await channel.close()

    def _on_close(self, _sender: object, exc: BaseException | None) -> None:
        if self.lost is None:
            self.lost = exc or ConnectionError("the channel closed")
        self._inbox.put_nowait(Lost(exc))
        for hook in self.on_lost:
            hook()

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        self._received += 1
        self._inbox.put_nowait(message)

    async def settled(self) -> None:
        """Return once the queue has processed every ack sent before on this channel.

        A passive declare does not prove that: a classic queue on RabbitMQ 3.10 answered
        it while acks were still waiting in its mailbox, and the channel's close then
        put those messages back (measured: 7 to 167 of 1 200 acked messages back in
        the DLQ after an export with ``delete`` had "proven" their removal, in about
        one run in ten). A ``basic.get`` on the same channel is handled after them. A
        message it happens to fetch joins the deliveries, in queue order.
        """
        if self.lost is not None:
            raise LostConnection(self.lost)
        assert self.channel is not None
        queue = await self.channel.get_queue(self.queue, ensure=False)
        fetched = await queue.get(no_ack=False, fail=False)
        if fetched is not None:
            self._inbox.put_nowait(fetched)

    async def ready(self) -> int:
        """Messages ready in the queue now (a round trip on this reader's channel, so it
        also proves that every ack sent before it has been processed)."""
        return (await self._declare()).message_count or 0

    async def _declare(self) -> aiormq.spec.Queue.DeclareOk:
        if self.lost is not None:
            raise LostConnection(self.lost)
        assert self.channel is not None
        try:
            queue = await self.channel.declare_queue(self.queue, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            raise DlqError(
                f"queue {self.queue!r} does not exist on {redact_url(self.url)}; give the "
                "service's queue (its DLQ is QUEUE.dlq) or the DLQ's full name, and see "
                "'rabbitq stats QUEUE'"
            ) from None
        return queue.declaration_result

    async def deliveries(self) -> AsyncIterator[AbstractIncomingMessage]:
        """Deliveries in queue order, at most :attr:`total`; raises ``LostConnection``
        if the channel closes."""
        seen = 0
        while seen < self.total:
            try:
                item = await asyncio.wait_for(self._inbox.get(), timeout=IDLE)
            except TimeoutError:
                # Another consumer (a second replay) may hold the rest: stop when the
                # broker has nothing ready for us.
                if self.channel is None or self.channel.is_closed:
                    raise LostConnection(None) from None
                try:
                    if await self.ready() == 0 and self._inbox.empty():
                        return
                except (aiormq.exceptions.AMQPError, ConnectionError, RuntimeError) as exc:
                    raise LostConnection(exc) from exc
                continue
            if isinstance(item, Lost):
                raise LostConnection(item.exc)
            seen += 1
            yield item


class LostConnection(Exception):
    """The reader's channel closed; ``exc`` is why, if known."""

    def __init__(self, exc: BaseException | None) -> None:
        self.exc = exc
        super().__init__(str(exc) if exc else "channel closed")


@contextlib.asynccontextmanager
async def connection_for(
    url: str, connection: AbstractConnection | None, name: str
) -> AsyncIterator[AbstractConnection]:
    """``connection`` if given, else a new one closed on exit."""
    if connection is not None:
        yield connection
        return
    own = await connect_once(url, name=name)
    try:
        yield own
    finally:
        with contextlib.suppress(Exception):
            await own.close()


def user_of(url: str) -> str:
    """The user the broker knows the connection by (``user_id`` must equal it)."""
    return unquote(urlsplit(url).username or "guest")


def interrupted(tally: Tally, exc: BaseException | None, url: str) -> DlqInterrupted:
    """The error of an operation whose connection closed, with its tally so far."""
    detail = f" ({type(exc).__name__})" if exc is not None else ""
    dup = (
        f"; {tally.possible_duplicates} possible duplicate(s): copied, but their removal "
        "from the DLQ was not confirmed, so a new run may copy them again"
        if tally.possible_duplicates
        else ""
    )
    return DlqInterrupted(
        f"the connection to {redact_url(url)} closed during {tally.operation}{detail}: "
        f"{tally.done} done, the rest is still in {tally.queue!r}{dup}",
        tally,
    )


@dataclass(kw_only=True)
class Session:
    """What every DLQ operation starts with: the broker URL, the DLQ, the filters, the
    tally, the connection and a :class:`Reader` of the DLQ."""

    url: str
    dlq: str
    filters: Filters
    tally: Tally
    connection: AbstractConnection
    reader: Reader
    # Called before a lost connection is raised as DlqInterrupted (to count duplicates).
    on_interrupted: Callable[[], None] | None = None


@contextlib.asynccontextmanager
async def session(
    operation: str,
    queue: str,
    *,
    url: str | None,
    filters: Filters | None,
    connection: AbstractConnection | None,
    dry_run: bool = False,
    also_lost: tuple[type[BaseException], ...] = (),
) -> AsyncIterator[Session]:
    """The shared preamble of list, replay, purge and export.

    Resolves the URL and the DLQ, connects (unless given ``connection``) and opens a
    :class:`Reader`; a :class:`LostConnection` (and ``also_lost``) inside the block
    becomes :class:`~rabbitq.errors.DlqInterrupted` with the tally so far.
    """
    target = resolve_url(url)
    dlq = resolve_dlq(queue)
    tally = Tally(operation=operation, queue=dlq, dry_run=dry_run)
    name = f"rabbitq dlq {operation}" + ("" if operation == "list" else f" {dlq}")
    async with connection_for(target, connection, name) as conn, Reader(conn, dlq, target) as rd:
        tally.total = rd.total
        tally.other_consumers = rd.other_consumers
        s = Session(
            url=target,
            dlq=dlq,
            filters=filters or Filters(),
            tally=tally,
            connection=conn,
            reader=rd,
        )
        lost: tuple[type[BaseException], ...] = (LostConnection, *also_lost)
        try:
            yield s
        except lost as exc:
            if s.on_interrupted is not None:
                s.on_interrupted()
            cause = exc.exc if isinstance(exc, LostConnection) else exc
            raise interrupted(tally, cause, target) from None
