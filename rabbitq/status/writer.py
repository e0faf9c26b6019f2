"""The status writer: records queue in memory and one background task writes them.

:meth:`StatusWriter.add` is what the worker, the publisher and the DLQ tools call, on
the event loop: it appends to a bounded queue and returns; it never waits and never
raises, so a status record can neither delay nor fail an ack. One task per event loop
(started by the first record, ended when the queue is empty) waits ``interval`` seconds
or until ``batch`` records are queued, then writes them ``batch`` at a time, one round
trip each (one INSERT, one Redis pipeline).

Best effort: a write that fails loses its records (they are not written twice, nor out
of order), and writing pauses for ``backoff`` seconds while records queue up; a full
queue drops new records. Both are counted (:attr:`StatusWriter.counts`, and the
observers: ``rabbitq_status_records_total``), and an outage is logged once when it
starts and once when it ends, with the number of records lost, never once per record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from typing import Protocol

from .backend import StatusStore
from .model import Record

log = logging.getLogger("rabbitq.status")

DEFAULT_CAPACITY = 50_000  # records queued at most (a few MB)
DEFAULT_BATCH = 1000  # records per write
DEFAULT_INTERVAL = 0.2  # seconds a record may wait for company
DEFAULT_BACKOFF = 1.0  # seconds without writes after a failed one
FLUSH_TIMEOUT = 5.0  # seconds flush() waits for the store before giving up

WRITTEN, FAILED, DROPPED = "written", "failed", "dropped"
OUTCOMES = (WRITTEN, FAILED, DROPPED)


class StatusObserver(Protocol):
    """Told how many records were written or lost (``outcome``: one of :data:`OUTCOMES`)."""

    def status_records(self, outcome: str, count: int) -> None: ...


class StatusWriter:
    """Writes :class:`~rabbitq.status.model.Record` s to ``store`` in batches."""

    def __init__(
        self,
        store: StatusStore,
        *,
        capacity: int = DEFAULT_CAPACITY,
        batch: int = DEFAULT_BATCH,
        interval: float = DEFAULT_INTERVAL,
        backoff: float = DEFAULT_BACKOFF,
    ) -> None:
        self.store = store
        self.capacity = capacity
        self.batch = batch
        self.interval = interval
        self.backoff = backoff
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.observers: list[StatusObserver] = []
        self._queue: deque[Record] = deque()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Future[None] | None = None
        self._hurry = False  # flush() wants everything written now
        self._outage: str | None = None  # why records are being lost, while they are
        self._lost_in_outage = 0

    def __repr__(self) -> str:
        return f"StatusWriter({self.store!r})"

    @property
    def queued(self) -> int:
        """Records waiting to be written."""
        return len(self._queue)

    def add(self, record: Record) -> None:
        """Queue ``record`` (dropped and counted if the queue is full). Never raises."""
        if len(self._queue) >= self.capacity:
            self._lose(DROPPED, 1, f"more than {self.capacity} records queued")
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop: nothing could ever write it
            self._lose(DROPPED, 1, "no event loop to write from")
            return
        self._queue.append(record)
        if self._task is None or loop is not self._loop:
            self._start(loop)
        elif len(self._queue) >= self.batch:
            self._wake_up()

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is not loop:  # the first loop, or the last one ended unflushed
            self._loop = loop
            self._wake = None
        self._task = loop.create_task(self._run(), name="rabbitq status writer")

    def _wake_up(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if woken (a full batch, a flush)."""
        if self._hurry:
            return
        assert self._loop is not None
        self._wake = self._loop.create_future()
        timer = self._loop.call_later(seconds, self._wake_up)
        try:
            await self._wake
        finally:
            timer.cancel()
            self._wake = None

    async def _run(self) -> None:
        try:
            while self._queue:
                if len(self._queue) < self.batch:  # wait for company
                    await self._pause(self.interval)
                count = min(self.batch, len(self._queue))
                records = [self._queue.popleft() for _ in range(count)]
                if not await self._write(records):
                    await self._pause(self.backoff)
        except asyncio.CancelledError:  # a flush out of time, or the loop's end: counted
            left = len(self._queue)
            self._queue.clear()
            if left:
                self._lose(DROPPED, left, "the writer was cancelled")
            raise
        finally:
            self._task = None

    async def _write(self, records: Sequence[Record]) -> bool:
        try:
            await self.store.write(records)
        except asyncio.CancelledError:  # a flush ran out of time: not written either
            self._lose(DROPPED, len(records), "cancelled while writing")
            raise
        except Exception as exc:  # any failure: the records are lost, counted, logged once
            self._lose(FAILED, len(records), f"{type(exc).__name__}: {exc}")
            return False
        self._count(WRITTEN, len(records))
        if self._outage is not None:
            log.warning(
                "status store %r is back: %d status record(s) were lost while it was not",
                self.store,
                self._lost_in_outage,
            )
            self._outage, self._lost_in_outage = None, 0
        return True

    def _lose(self, outcome: str, count: int, why: str) -> None:
        self._count(outcome, count)
        self._lost_in_outage += count
        if self._outage is None:
            self._outage = why
            log.warning(
                "status records are being lost (%s, %r); messages are not affected, "
                "and the records lost are counted in rabbitq_status_records_total",
                why,
                self.store,
            )

    def _count(self, outcome: str, count: int) -> None:
        self.counts[outcome] += count
        for observer in self.observers:
            observer.status_records(outcome, count)

    async def flush(self, timeout: float = FLUSH_TIMEOUT, *, close: bool = True) -> None:
        """Write what is queued now (at most ``timeout`` seconds; what is left is
        counted as dropped), then close the store's connections (unless not
        ``close``: a reader follows). Writing starts again with the next record."""
        task = self._task
        if task is not None and self._loop is asyncio.get_running_loop():
            self._hurry = True
            self._wake_up()
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            finally:
                self._hurry = False
        if self._queue and self._task is None:
            left = len(self._queue)
            self._queue.clear()
            self._lose(DROPPED, left, f"not written within {timeout:g}s at flush")
        if not close:
            return
        try:
            await self.store.close()
        except Exception as exc:
            log.warning("could not close %r: %s", self.store, exc)
