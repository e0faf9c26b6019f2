"""Dead-letter queue operations: list, show, replay, export, import and purge.

Every operation reads the DLQ the same way: it consumes *without acking*, up to the
number of messages the queue held when it started (a new arrival never makes it run
forever), and at the end closes its channel, so that the broker puts back every
message it did not remove. RabbitMQ returns them to their original positions, in
order, for classic and quorum queues alike (checked on 3.10). Two side effects are
visible: those messages are marked ``redelivered``, and on a quorum DLQ their
``x-delivery-count`` goes up by one. rabbitq's DLQs have no delivery limit, so that
count never dead-letters anything.

A message leaves the DLQ (replay, ``export --delete``, purge) only by an ack sent
after its copy is safe: confirmed by the broker (replay, import) or fsynced to disk
(export). If the connection drops, unacked messages go back to the DLQ; acks that
were sent but not yet known to be processed are counted as possible duplicates.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

from . import dlq_file
from .connection import connect_once
from .dlq_message import (
    BROKER_REASON,
    DeadMessage,
    Filters,
    failed_at_of,
    origin_of,
    parse_when,
    reason_of,
    replay_copy,
    replay_headers,
    resolve_dlq,
    stored_copy,
)
from .errors import (
    DlqError,
    DlqInterrupted,
    PublishError,
    PublishInterrupted,
    PublishNacked,
    Unroutable,
)
from .publisher import confirmed
from .settings import redact_url, resolve_url

__all__ = [
    "BROKER_REASON",
    "DEFAULT_WINDOW",
    "DeadMessage",
    "Filters",
    "Progress",
    "Tally",
    "export",
    "failed_at_of",
    "import_messages",
    "list_messages",
    "origin_of",
    "parse_when",
    "purge",
    "read_file",
    "reason_of",
    "replay",
    "replay_copy",
    "replay_headers",
    "resolve_dlq",
    "show",
    "stored_copy",
]

# Copies in flight (published, confirm not yet received) during replay and import.
DEFAULT_WINDOW = 256
# AMQP's prefetch count is 16 bits; a larger DLQ is read with no prefetch limit.
_MAX_PREFETCH = 65535
# With nothing delivered for this long, ask the broker whether anything is left.
_IDLE = 0.5
# fsync the export file (and then ack) after this many messages.
_EXPORT_BATCH = 500

Progress = Callable[["Tally"], None]


# ---------------------------------------------------------------- tallies


@dataclass(kw_only=True)
class Tally:
    """What an operation did, updated as it goes (handed to the progress callback).

    ``total`` is what the DLQ held at the start (or the file's message count);
    ``scanned`` the messages looked at; ``done`` those moved, exported, imported
    or removed; ``skipped`` those that did not match (left in the DLQ); ``failed`` those
    that could not be copied (left in the DLQ, reasons in ``failures``).
    ``possible_duplicates``: copies that may be stored while their original is still
    in the DLQ, after a lost connection; 0 when the operation finished.
    ``other_consumers``: consumers of the DLQ when it started; messages they held (an
    interrupted run's, until the broker notices it is gone) were not seen.
    """

    operation: str
    queue: str
    total: int = 0
    scanned: int = 0
    done: int = 0
    skipped: int = 0
    failed: int = 0
    possible_duplicates: int = 0
    other_consumers: int = 0
    dry_run: bool = False
    failures: dict[str, int] = field(default_factory=dict)
    matched: list[DeadMessage] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def fail(self, why: str) -> None:
        """Count a message that could not be handled, and why."""
        self.failed += 1
        self.failures[why] = self.failures.get(why, 0) + 1

    @property
    def elapsed(self) -> float:
        """Seconds since the operation started."""
        return time.monotonic() - self.started

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (without the matched messages)."""
        return {
            "operation": self.operation,
            "queue": self.queue,
            "dry_run": self.dry_run,
            "total": self.total,
            "scanned": self.scanned,
            "done": self.done,
            "skipped": self.skipped,
            "failed": self.failed,
            "possible_duplicates": self.possible_duplicates,
            "other_consumers": self.other_consumers,
            "failures": self.failures,
            "seconds": round(self.elapsed, 3),
        }


# ---------------------------------------------------------------- reading a DLQ (I/O)


class _Lost:
    """Put on the delivery queue when the channel closes."""

    def __init__(self, exc: BaseException | None) -> None:
        self.exc = exc


class _Reader:
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
        self._inbox: asyncio.Queue[AbstractIncomingMessage | _Lost] = asyncio.Queue()

    async def __aenter__(self) -> _Reader:
        self.channel = await self.connection.channel(publisher_confirms=False)
        self.channel.close_callbacks.add(self._on_close)
        declared = await self._declare()
        self.total = declared.message_count or 0
        # Messages held (unacked) by another consumer are not ready, so this run cannot
        # see them: often an interrupted run whose connection the broker has not yet
        # closed. Its messages return to the DLQ when it does.
        self.other_consumers = declared.consumer_count or 0
        if self.total:
            prefetch = self.total if self.total <= _MAX_PREFETCH else 0
            await self.channel.set_qos(prefetch_count=prefetch)
            queue = await self.channel.get_queue(self.queue, ensure=False)
            await queue.consume(self._on_message, no_ack=False)
        return self

    async def ack(self, delivery: AbstractIncomingMessage) -> None:
        """Hand the ack to the connection without waiting for the socket (a dead
        connection could keep that wait pending forever); :meth:`ready` proves later
        that the broker processed it."""
        if self.lost is not None:
            raise _LostConnection(self.lost)
        assert delivery.delivery_tag is not None
        await delivery.channel.basic_ack(delivery.delivery_tag, wait=False)

    async def __aexit__(self, *exc: object) -> None:
        self.on_lost.clear()
        channel, self.channel = self.channel, None
        if channel is not None and not channel.is_closed:
            with contextlib.suppress(Exception):
                await channel.close()

    def _on_close(self, _sender: object, exc: BaseException | None) -> None:
        if self.lost is None:
            self.lost = exc or ConnectionError("the channel closed")
        self._inbox.put_nowait(_Lost(exc))
        for hook in self.on_lost:
            hook()

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        self._inbox.put_nowait(message)

    async def ready(self) -> int:
        """Messages ready in the queue now (a round trip on this reader's channel, so it
        also proves that every ack sent before it has been processed)."""
        return (await self._declare()).message_count or 0

    async def _declare(self) -> aiormq.spec.Queue.DeclareOk:
        if self.lost is not None:
            raise _LostConnection(self.lost)
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
        """Deliveries in queue order, at most :attr:`total`; raises ``_LostConnection``
        if the channel closes."""
        seen = 0
        while seen < self.total:
            try:
                item = await asyncio.wait_for(self._inbox.get(), timeout=_IDLE)
            except TimeoutError:
                # Another consumer (a second replay) may hold the rest: stop when the
                # broker has nothing ready for us.
                if self.channel is None or self.channel.is_closed:
                    raise _LostConnection(None) from None
                try:
                    if await self.ready() == 0 and self._inbox.empty():
                        return
                except (aiormq.exceptions.AMQPError, ConnectionError, RuntimeError) as exc:
                    raise _LostConnection(exc) from exc
                continue
            if isinstance(item, _Lost):
                raise _LostConnection(item.exc)
            seen += 1
            yield item


class _LostConnection(Exception):
    def __init__(self, exc: BaseException | None) -> None:
        self.exc = exc
        super().__init__(str(exc) if exc else "channel closed")


@contextlib.asynccontextmanager
async def _connection(
    url: str, connection: AbstractConnection | None, name: str
) -> AsyncIterator[AbstractConnection]:
    if connection is not None:
        yield connection
        return
    own = await connect_once(url, name=name)
    try:
        yield own
    finally:
        with contextlib.suppress(Exception):
            await own.close()


def _user(url: str) -> str:
    return unquote(urlsplit(url).username or "guest")


def _interrupted(tally: Tally, exc: BaseException | None, url: str) -> DlqInterrupted:
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


# ---------------------------------------------------------------- list, show


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
    target = resolve_url(url)
    dlq = resolve_dlq(queue)
    filters = filters or Filters()
    found: list[DeadMessage] = []
    async with (
        _connection(target, connection, "rabbitq dlq list") as conn,
        _Reader(conn, dlq, target) as reader,
    ):
        try:
            async for delivery in reader.deliveries():
                m = DeadMessage.from_delivery(delivery, dlq)
                if filters.matches(m):
                    found.append(m)
                    if limit is not None and len(found) >= limit:
                        break
        except _LostConnection as exc:
            raise _interrupted(Tally(operation="list", queue=dlq), exc.exc, target) from None
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


# ---------------------------------------------------------------- moving (I/O)


class _Mover:
    """Publishes copies with pipelined confirms and acks each original once its copy is
    confirmed. Keeps the numbers that say what a lost connection may have duplicated."""

    def __init__(
        self,
        reader: _Reader,
        channel: AbstractChannel,
        tally: Tally,
        *,
        window: int,
        on_progress: Progress | None,
    ) -> None:
        self.reader = reader
        self.exchange = channel.default_exchange
        self.tally = tally
        self.window = asyncio.Semaphore(window)
        self.barrier_every = window
        self.on_progress = on_progress
        self.tasks: set[asyncio.Task[None]] = set()
        self.missing: set[str] = set()
        self.published = 0  # copies handed to the broker
        self.not_stored = 0  # copies the broker refused: their originals stay, no duplicate
        self.acks_sent = 0
        self.acks_proven = 0  # acks known to be processed (a round trip came back after)
        self.lost: BaseException | None = None
        self._barrier: asyncio.Task[None] | None = None
        reader.on_lost.append(self._abort)

    def _abort(self) -> None:
        """The connection is gone: stop waiting for confirms and acks that may never
        come (what they did is accounted for by :attr:`unsettled`)."""
        self.lost = self.lost or self.reader.lost
        for task in list(self.tasks):
            task.cancel()
        if self._barrier is not None:
            self._barrier.cancel()

    @property
    def unsettled(self) -> int:
        """Copies that may be stored while their original may still be in the DLQ."""
        return self.published - self.not_stored - self.acks_proven

    async def submit(
        self, delivery: AbstractIncomingMessage, copy: aio_pika.Message, target: str
    ) -> None:
        """Start moving one message; waits while ``window`` copies are in flight, and
        while ``window`` acks wait for their proof: so at most 2 x ``window`` copies can
        be unsettled when the connection drops."""
        barrier = self._barrier
        if barrier is not None and self.acks_sent - self.acks_proven >= self.barrier_every:
            await asyncio.wait({barrier})
        await self.window.acquire()
        if self.lost is not None:
            self.window.release()
            return
        task = asyncio.create_task(self._move(delivery, copy, target))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _move(
        self, delivery: AbstractIncomingMessage, copy: aio_pika.Message, target: str
    ) -> None:
        try:
            self.published += 1
            try:
                await confirmed(self.exchange, copy, target)
            except Unroutable:
                self.not_stored += 1
                self.missing.add(target)
                self.tally.fail(f"queue {target!r} does not exist")
                return  # the original stays unacked and goes back to the DLQ at the end
            except PublishNacked:
                self.not_stored += 1
                self.tally.fail(f"the broker refused the copy for {target!r}")
                return
            except PublishInterrupted as exc:
                self.lost = self.lost or exc
                return
            try:
                await self.reader.ack(delivery)
            except Exception as exc:  # the channel or connection is gone
                self.lost = self.lost or exc
                self.tally.done += 1
                return
            self.acks_sent += 1
            self.tally.done += 1
            if self.acks_sent - self.acks_proven >= self.barrier_every and self._barrier is None:
                self._barrier = asyncio.create_task(self._prove())
        finally:
            self.window.release()
            if self.on_progress is not None:
                self.on_progress(self.tally)

    async def _prove(self) -> None:
        sent = self.acks_sent
        try:
            await self.reader.ready()
            self.acks_proven = max(self.acks_proven, sent)
        except Exception as exc:
            self.lost = self.lost or exc
        finally:
            self._barrier = None

    async def finish(self) -> None:
        """Wait for every copy in flight, then prove every ack sent."""
        while self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        if self._barrier is not None:
            await asyncio.gather(self._barrier, return_exceptions=True)
        if self.lost is None and self.acks_sent > self.acks_proven:
            await self._prove()


class _Pacer:
    """Spaces out work to ``rate`` per second (no limit when None)."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.count = 0
        self.start = time.monotonic()

    async def wait(self) -> None:
        if self.rate:
            delay = self.start + self.count / self.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        self.count += 1


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
) -> Tally:
    """Move matching DLQ messages back to the queue they failed in (or ``to``).

    Each copy goes through the default exchange to that queue only (mandatory), with
    :func:`replay_headers`; its original is acked only after the broker confirmed the
    copy, ``window`` copies in flight at a time. Messages that do not match, or whose
    copy fails (no such queue), stay in the DLQ. ``dry_run`` moves nothing and lists
    in ``matched`` what would move. A lost connection raises :class:`DlqInterrupted`
    with the tally so far (see ``possible_duplicates``).
    """
    target = resolve_url(url)
    dlq = resolve_dlq(queue)
    filters = filters or Filters()
    tally = Tally(operation="replay", queue=dlq, dry_run=dry_run)
    pacer = _Pacer(rate)
    moved_ids: set[str] = set()
    selected = 0
    async with _connection(target, connection, f"rabbitq dlq replay {dlq}") as conn:
        publish_channel = await conn.channel(publisher_confirms=True, on_return_raises=True)
        try:
            async with _Reader(conn, dlq, target) as reader:
                tally.total = reader.total
                tally.other_consumers = reader.other_consumers
                mover = _Mover(
                    reader, publish_channel, tally, window=window, on_progress=on_progress
                )
                try:
                    async for delivery in reader.deliveries():
                        if mover.lost is not None:
                            break
                        m = DeadMessage.from_delivery(delivery, dlq)
                        tally.scanned += 1
                        if on_progress is not None:
                            on_progress(tally)
                        # A message this run already moved can die again and come back
                        # while it runs: leave that one for the next run.
                        if not filters.matches(m) or (m.message_id or "") in moved_ids:
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
                                moved_ids.add(m.message_id)
                            await mover.submit(
                                delivery, replay_copy(m, user=_user(target)), destination
                            )
                        if limit is not None and selected >= limit:
                            break
                except _LostConnection as exc:
                    mover.lost = mover.lost or exc.exc or exc
                await mover.finish()
                if mover.lost is not None:
                    tally.possible_duplicates = mover.unsettled
                    raise _interrupted(tally, mover.lost, target)
        finally:
            if not publish_channel.is_closed:
                with contextlib.suppress(Exception):
                    await publish_channel.close()
    return tally


# ---------------------------------------------------------------- purge


async def purge(
    queue: str,
    *,
    url: str | None = None,
    filters: Filters | None = None,
    limit: int | None = None,
    dry_run: bool = False,
    on_progress: Progress | None = None,
    connection: AbstractConnection | None = None,
) -> Tally:
    """Delete the DLQ messages that match ``filters`` (all of them without filters), at
    most ``limit``; the others stay, in order. ``dry_run`` deletes nothing and counts
    what would go."""
    target = resolve_url(url)
    dlq = resolve_dlq(queue)
    filters = filters or Filters()
    tally = Tally(operation="purge", queue=dlq, dry_run=dry_run)
    async with (
        _connection(target, connection, f"rabbitq dlq purge {dlq}") as conn,
        _Reader(conn, dlq, target) as reader,
    ):
        tally.total = reader.total
        tally.other_consumers = reader.other_consumers
        try:
            async for delivery in reader.deliveries():
                m = DeadMessage.from_delivery(delivery, dlq)
                tally.scanned += 1
                if not filters.matches(m):
                    tally.skipped += 1
                    continue
                if not dry_run:
                    await reader.ack(delivery)
                tally.done += 1
                if on_progress is not None:
                    on_progress(tally)
                if limit is not None and tally.done >= limit:
                    break
            if not dry_run:
                await reader.ready()  # every ack has been processed
        except (_LostConnection, aiormq.exceptions.AMQPError, ConnectionError) as exc:
            cause = exc.exc if isinstance(exc, _LostConnection) else exc
            raise _interrupted(tally, cause, target) from None
    return tally


# ---------------------------------------------------------------- export, import


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform can open a directory
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


async def export(
    queue: str,
    path: str | os.PathLike[str],
    *,
    url: str | None = None,
    filters: Filters | None = None,
    limit: int | None = None,
    delete: bool = False,
    on_progress: Progress | None = None,
    connection: AbstractConnection | None = None,
) -> Tally:
    """Write the matching DLQ messages to a new JSONL file (see :mod:`rabbitq.dlq_file`).

    The DLQ is left as it was unless ``delete``: then each message is acked only after
    the file holding it has been flushed and fsynced. An existing file is never
    overwritten.
    """
    target = resolve_url(url)
    dlq = resolve_dlq(queue)
    filters = filters or Filters()
    out_path = Path(path)
    tally = Tally(operation="export", queue=dlq)
    async with (
        _connection(target, connection, f"rabbitq dlq export {dlq}") as conn,
        _Reader(conn, dlq, target) as reader,
    ):
        tally.total = reader.total
        tally.other_consumers = reader.other_consumers
        try:
            handle = out_path.open("xb")
        except FileExistsError:
            raise DlqError(f"{out_path} already exists: choose a new file name") from None
        except OSError as exc:
            raise DlqError(f"cannot create {out_path}: {exc.strerror}") from None
        pending: list[AbstractIncomingMessage] = []
        removed = 0  # exported messages whose removal from the DLQ is proven

        async def settle() -> None:
            nonlocal removed
            handle.flush()
            os.fsync(handle.fileno())
            if pending:
                for delivery in pending:
                    await reader.ack(delivery)
                sent = tally.done
                pending.clear()
                await reader.ready()  # the broker has processed every ack sent
                removed = sent

        try:
            with handle:
                _fsync_dir(out_path)
                async for delivery in reader.deliveries():
                    m = DeadMessage.from_delivery(delivery, dlq)
                    tally.scanned += 1
                    if not filters.matches(m):
                        tally.skipped += 1
                        continue
                    handle.write(dlq_file.dumps(m.record()))
                    tally.done += 1
                    if delete:
                        pending.append(delivery)
                        if len(pending) >= _EXPORT_BATCH:
                            await settle()
                    if on_progress is not None:
                        on_progress(tally)
                    if limit is not None and tally.done >= limit:
                        break
                await settle()
        except (_LostConnection, aiormq.exceptions.AMQPError, ConnectionError) as exc:
            if delete:  # in the file, and perhaps still in the DLQ
                tally.possible_duplicates = tally.done - removed
            cause = exc.exc if isinstance(exc, _LostConnection) else exc
            raise _interrupted(tally, cause, target) from None
    return tally


def read_file(path: str | os.PathLike[str]) -> list[dlq_file.Record]:
    """Every message of an export file, checked; :class:`DlqError` names the first bad
    line. (:func:`import_messages` checks the whole file the same way, without holding it
    in memory, before it publishes anything.)"""
    return list(_records(path))


def _records(path: str | os.PathLike[str]) -> Iterable[dlq_file.Record]:
    file = Path(path)
    try:
        handle = file.open("rb")
    except OSError as exc:
        raise DlqError(f"cannot read {file}: {exc.strerror}") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                yield dlq_file.loads(line, where=f"{file}:{number}")


def _check_file(
    path: str | os.PathLike[str], dlq: str, *, replay: bool, to: str | None
) -> tuple[int, set[str]]:
    """How many messages the file holds, and the queues they would go to."""
    count = 0
    targets = {dlq} if not replay else set()
    for count, record in enumerate(_records(path), start=1):
        if replay:
            destination = to or DeadMessage.from_record(record, dlq).origin
            if destination is None:
                raise DlqError(
                    f"{path}: message {count} does not say which queue it failed in "
                    "(no rabbitq-queue header): give --to QUEUE"
                )
            targets.add(destination)
    return count, targets


async def _require_queues(connection: AbstractConnection, names: Iterable[str], url: str) -> None:
    channel = await connection.channel(publisher_confirms=False)
    try:
        for name in sorted(names):
            try:
                await channel.declare_queue(name, passive=True)
            except aiormq.exceptions.ChannelNotFoundEntity:
                raise DlqError(
                    f"queue {name!r} does not exist on {redact_url(url)}; nothing was "
                    "imported (declare it with 'rabbitq topology MODULE:APP', or give "
                    "the right QUEUE or --to)"
                ) from None
    finally:
        if not channel.is_closed:
            await channel.close()


async def import_messages(
    queue: str,
    path: str | os.PathLike[str],
    *,
    url: str | None = None,
    replay: bool = False,
    to: str | None = None,
    window: int = DEFAULT_WINDOW,
    on_progress: Progress | None = None,
    connection: AbstractConnection | None = None,
) -> Tally:
    """Publish the messages of an export file back into the DLQ of ``queue``, exactly as
    exported; with ``replay``, into the queue each failed in (or ``to``) as
    :func:`replay` would.

    First the whole file is checked and every target queue must exist: a bad line or a
    missing queue publishes nothing. Each publish is confirmed, ``window`` in flight; one
    that is not stops the import with an error saying how many were stored.
    """
    target = resolve_url(url)
    dlq = resolve_dlq(queue)
    tally = Tally(operation="import", queue=dlq)
    tally.total, targets = _check_file(path, dlq, replay=replay, to=to)
    user = _user(target)
    async with _connection(target, connection, f"rabbitq dlq import {dlq}") as conn:
        await _require_queues(conn, targets, target)
        channel = await conn.channel(publisher_confirms=True, on_return_raises=True)
        exchange = channel.default_exchange
        window_left = asyncio.Semaphore(window)
        errors: list[PublishError] = []

        async def publish(copy: aio_pika.Message, routing_key: str) -> None:
            try:
                await confirmed(exchange, copy, routing_key)
                tally.done += 1
            except PublishError as exc:
                errors.append(exc)
                tally.fail(type(exc).__name__)
            finally:
                window_left.release()
                if on_progress is not None:
                    on_progress(tally)

        tasks: set[asyncio.Task[None]] = set()
        try:
            for record in _records(path):
                await window_left.acquire()
                if errors:
                    break
                m = DeadMessage.from_record(record, dlq)
                tally.scanned += 1
                if replay:
                    copy, key = replay_copy(m, user=user), to or m.origin or dlq
                else:
                    copy, key = stored_copy(m, user=user), dlq
                task = asyncio.create_task(publish(copy, key))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            while tasks:
                await asyncio.gather(*tasks)
        finally:
            with contextlib.suppress(Exception):
                await channel.close()
    if errors:
        unknown = sum(1 for e in errors if isinstance(e, PublishInterrupted))
        tally.possible_duplicates = unknown
        raise DlqError(
            f"import stopped: {errors[0]}; {tally.done} of {tally.total} messages were "
            f"stored"
            + (f" and {unknown} may have been" if unknown else "")
            + ": importing the whole file again would store those twice"
        )
    return tally
