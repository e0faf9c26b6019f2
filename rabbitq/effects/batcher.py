"""Group commit for the idempotency stores: the calls issued together go to the store together.

A :class:`Batcher` collects items (claims, done marks, releases) and hands them to one
``flush(items)`` coroutine, which does the I/O (one statement, one script call) and
answers each item. There is **no timer**: the first item starts a flush on the event
loop's next turn, so every item issued in the same turn (the handlers that a burst of
deliveries started, the done marks of the handlers that just finished) goes in it; the
items issued while a flush is in flight go in the next one, started as soon as it
returns. A lone call therefore waits for nothing but its own round trip, and under load
the batch grows by itself to what arrived during the last round trip. The worker's ack
coalescer keeps its own short wait; this adds none.

Each caller gets its own item's answer or error; a flush that fails as a whole (the
store unreachable, the connection cut) fails every item in it with that error, as a
single failed call would. A caller cancelled before its item was sent is left out of
the batch; one cancelled after it was sent gets nothing (its item took effect or not,
as a cancelled single call). ``key`` keeps two items with the same key out of one batch
(the second waits for the next): a PostgreSQL ``INSERT ... ON CONFLICT`` cannot touch a
row twice in one statement, and sequential semantics stay exact.

The decisions (:func:`take`, :func:`can_start`) are pure functions; :class:`Batcher`
holds the state and runs the flushes on the running loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
P = TypeVar("P")

DEFAULT_MAX_BATCH = 1000  # items per flush: bounds one statement's size and its locks


class FlushCancelled(Exception):
    """The flush carrying this item was cancelled (the event loop is shutting down); the
    item may or may not have taken effect."""


def can_start(*, pending: int, starting: bool, in_flight: int, max_in_flight: int) -> bool:
    """Whether to start a flush now: items wait, none is about to be taken by a flush
    already started, and fewer than ``max_in_flight`` flushes are running."""
    return pending > 0 and not starting and in_flight < max_in_flight


def take(
    pending: Sequence[P],
    *,
    limit: int,
    waiting: Callable[[P], bool],
    key: Callable[[P], Hashable] | None = None,
) -> tuple[list[P], list[P]]:
    """The next batch and what stays pending, both in arrival order.

    The batch is the first ``limit`` items whose caller still waits (``waiting``), at most
    one per ``key``; an item whose key is already in the batch stays for the next one.
    Items whose caller gave up are dropped.
    """
    batch: list[P] = []
    rest: list[P] = []
    seen: set[Hashable] = set()
    for item in pending:
        if not waiting(item):
            continue
        if len(batch) >= limit:
            rest.append(item)
            continue
        if key is not None:
            k = key(item)
            if k in seen:
                rest.append(item)
                continue
            seen.add(k)
        batch.append(item)
    return batch, rest


Flush = Callable[[list[T]], Awaitable[Sequence["R | Exception"]]]
_Pending = tuple[T, "asyncio.Future[R]"]


class Batcher(Generic[T, R]):
    """Coalesces :meth:`submit` calls into flushes (see the module docstring).

    ``flush(items)`` returns one answer per item, in order: a value, or an exception for
    that item alone; if it raises, every item of the batch fails with that error.
    ``max_in_flight`` flushes may run at once (each on its own connection).
    """

    def __init__(
        self,
        flush: Flush[T, R],
        *,
        key: Callable[[T], Hashable] | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_in_flight: int = 1,
    ) -> None:
        self._flush = flush
        self._key = key
        self.max_batch = max_batch
        self.max_in_flight = max_in_flight
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[_Pending[T, R]] = []
        self._flushes: set[asyncio.Task[None]] = set()
        self._starting = False  # a flush task has yet to take the pending items

    @property
    def pending(self) -> int:
        """Items waiting for a flush to take them."""
        return len(self._pending)

    def submit(self, item: T) -> asyncio.Future[R]:
        """A future of ``item``'s answer (or error), set once a flush has carried it. A
        future rather than a coroutine: one frame less to resume on the hot path."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # first use, or the last loop ended without a drain
            self._loop, self._pending, self._flushes, self._starting = loop, [], set(), False
        future: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, future))
        self._maybe_start()
        return future

    async def drain(self) -> None:
        """Flush what was submitted and wait for every answer (before closing a store)."""
        if self._loop is not asyncio.get_running_loop():
            return  # nothing pending on this loop
        while self._flushes:
            await asyncio.wait(set(self._flushes))

    def _maybe_start(self) -> None:
        if not can_start(
            pending=len(self._pending),
            starting=self._starting,
            in_flight=len(self._flushes),
            max_in_flight=self.max_in_flight,
        ):
            return
        assert self._loop is not None
        # The task's first step runs after the callbacks already due: the items that
        # they submit go along in this flush.
        self._starting = True
        task = self._loop.create_task(self._run())
        self._flushes.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._flushes.discard(task)
        if task.get_loop() is not self._loop:
            return
        if task.cancelled():
            self._starting = False  # (cancelled before it took the pending items)
        self._maybe_start()  # the items submitted while it ran

    async def _run(self) -> None:
        self._starting = False
        key_of = self._key
        batch, self._pending = take(
            self._pending,
            limit=self.max_batch,
            waiting=lambda p: not p[1].done(),
            key=None if key_of is None else (lambda p: key_of(p[0])),
        )
        if self._pending:
            self._maybe_start()  # a second flush may run beside this one
        if not batch:
            return
        try:
            answers = await self._flush([item for item, _ in batch])
        except Exception as exc:
            _fail(batch, exc)
            return
        except BaseException:
            _fail(batch, FlushCancelled("the store's flush was cancelled"))
            raise
        if len(answers) != len(batch):
            _fail(batch, RuntimeError(f"{len(answers)} answers for {len(batch)} items"))
            return
        for (_, future), answer in zip(batch, answers, strict=True):
            if future.done():  # its caller was cancelled meanwhile
                continue
            if isinstance(answer, Exception):
                future.set_exception(answer)
            else:
                future.set_result(answer)


def _fail(batch: Sequence[_Pending[T, R]], error: Exception) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(error)
