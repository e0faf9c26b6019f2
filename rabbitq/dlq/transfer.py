"""Dead-letter queue operations with a file: export to JSONL, read it, import it back.

The file format is :mod:`rabbitq.dlq.file`'s. Export removes a message from the DLQ
(``delete``) only after the file holding it has been fsynced; import publishes each
message with a confirm, after checking the whole file and every target queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

import aiormq
from aio_pika.abc import AbstractConnection, AbstractIncomingMessage

from .._amqp.confirm import send_confirmed
from .._amqp.copy import Copy
from .._amqp.copy import replay as replay_copy
from .._amqp.copy import stored as stored_copy
from ..errors import DlqError, PublishError, PublishInterrupted
from ..settings import redact_url, resolve_url
from . import file as dlq_file
from .message import DeadMessage, Filters, resolve_dlq
from .operations import DEFAULT_WINDOW
from .reader import connection_for, session, user_of
from .tally import Progress, Tally

# fsync the export file (and then ack) after this many messages.
EXPORT_BATCH = 500


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
    """Write the matching DLQ messages to a new JSONL file (see :mod:`rabbitq.dlq.file`).

    The DLQ is left as it was unless ``delete``: then each message is acked only after
    the file holding it has been flushed and fsynced. An existing file is never
    overwritten.
    """
    out_path = Path(path)
    async with session(
        "export",
        queue,
        url=url,
        filters=filters,
        connection=connection,
        also_lost=(aiormq.exceptions.AMQPError, ConnectionError),
    ) as s:
        tally, reader = s.tally, s.reader
        try:
            handle = out_path.open("xb")
        except FileExistsError:
            raise DlqError(f"{out_path} already exists: choose a new file name") from None
        except OSError as exc:
            raise DlqError(f"cannot create {out_path}: {exc.strerror}") from None
        pending: list[AbstractIncomingMessage] = []
        removed = 0  # exported messages whose removal from the DLQ is proven

        def count_duplicates() -> None:
            if delete:  # in the file, and perhaps still in the DLQ
                tally.possible_duplicates = tally.done - removed

        s.on_interrupted = count_duplicates

        async def settle() -> None:
            nonlocal removed
            handle.flush()
            os.fsync(handle.fileno())
            if pending:
                for delivery in pending:
                    await reader.ack(delivery)
                sent = tally.done
                pending.clear()
                await reader.settled()  # the queue has processed every ack sent
                removed = sent

        with handle:
            _fsync_dir(out_path)
            async for delivery in reader.deliveries():
                m = DeadMessage.from_delivery(delivery, s.dlq)
                tally.scanned += 1
                if not s.filters.matches(m):
                    tally.skipped += 1
                    continue
                handle.write(dlq_file.dumps(m.record()))
                tally.done += 1
                if delete:
                    pending.append(delivery)
                    if len(pending) >= EXPORT_BATCH:
                        await settle()
                if on_progress is not None:
                    on_progress(tally)
                if limit is not None and tally.done >= limit:
                    break
            await settle()
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
    tally.into = tuple(sorted(targets))
    user = user_of(target)
    async with connection_for(target, connection, f"rabbitq dlq import {dlq}") as conn:
        await _require_queues(conn, targets, target)
        channel = await conn.channel(publisher_confirms=True, on_return_raises=True)
        window_left = asyncio.Semaphore(window)
        errors: list[PublishError] = []

        async def publish(copy: Copy, routing_key: str) -> None:
            try:
                await send_confirmed(channel, "", routing_key, copy.body, copy.properties)
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
