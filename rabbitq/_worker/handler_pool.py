"""The threads that run sync handlers, and what happens when one hangs.

A sync handler that outlives its ``timeout`` cannot be stopped: Python cannot kill a
thread. Its message is settled as a failed attempt, but the thread stays busy for as
long as the handler hangs. With a fixed pool of ``prefetch`` threads, a few hanging
messages retried a few times fill the pool, and every later message waits for a
thread until its own timeout: charged an attempt for a handler that never started
(issue 11: 36 of 60 healthy messages dead-lettered as ``exhausted``).

:class:`HandlerPool` keeps a thread for every handler that can run:

- a handler's time limit starts when its thread starts it, not when it is queued;
- a thread whose handler timed out is *abandoned*: the pool starts a replacement, so
  ``size`` threads stay available; at most ``max_abandoned`` are replaced (a bound on
  threads: ``size + max_abandoned``, by default 5 x ``size``), each reported
  (``abandoned`` callback: a warning naming the handler and a metric);
- a call that finds no thread within its time limit is not run and raises
  :class:`NotStarted` with an honest reason (the worker then retries it without
  counting an attempt).

An abandoned thread that finally returns rejoins the pool (``returned`` callback: the
metric goes down again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..hooks import Hooks

log = logging.getLogger("rabbitq.worker")

THREAD_PREFIX = "rabbitq-handler"
# Abandoned threads replaced by default: 4 per pool thread, at least 16. A bound, so
# that handlers hanging forever cannot grow the process without end.
ABANDONED_PER_THREAD = 4
MIN_ABANDONED = 16


def report_abandoned(hooks: Hooks, queue: str, type_name: str, abandoned: int) -> None:
    """The worker's ``abandoned`` callback: a warning naming the handler, and the hook."""
    log.warning(
        "a %s handler ran past its timeout and keeps its thread (%d held by such "
        "handlers; replaced so that other handlers still run)",
        type_name,
        abandoned,
    )
    hooks.handler_thread_abandoned(queue, type_name, abandoned)


def report_returned(hooks: Hooks, queue: str, type_name: str, abandoned: int) -> None:
    """The worker's ``returned`` callback: an info line, and the hook."""
    log.info(
        "a %s handler that ran past its timeout returned; its thread rejoins the pool "
        "(%d still held by such handlers)",
        type_name,
        abandoned,
    )
    hooks.handler_thread_returned(queue, type_name, abandoned)


class NotStarted(Exception):
    """No thread was free for the handler within its time limit: it did not run."""


class Expired(Exception):
    """The handler ran past its time limit; its thread is abandoned."""


@dataclass(eq=False)
class _Call:
    fn: Callable[[], Any]
    name: str
    loop: asyncio.AbstractEventLoop
    started: asyncio.Future[None]
    done: asyncio.Future[Any]
    given_up: bool = False
    abandoned: bool = False
    thread: threading.Thread | None = field(default=None, repr=False)


def _settle(
    future: asyncio.Future[Any], result: Any = None, exc: BaseException | None = None
) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


class HandlerPool:
    """Threads for sync handlers: ``size`` always available, up to ``max_abandoned``
    more while handlers hang. ``abandoned(name, count)`` is called (on the event loop)
    each time a handler's thread is abandoned, with the number now abandoned, and
    ``returned(name, count)`` when such a handler returns at last, with the number still
    abandoned."""

    def __init__(
        self,
        size: int,
        *,
        max_abandoned: int | None = None,
        abandoned: Callable[[str, int], None] | None = None,
        returned: Callable[[str, int], None] | None = None,
    ) -> None:
        self.size = max(1, size)
        self.max_abandoned = (
            max(MIN_ABANDONED, ABANDONED_PER_THREAD * self.size)
            if max_abandoned is None
            else max(0, max_abandoned)
        )
        self._on_abandoned = abandoned
        self._on_returned = returned
        self._lock = threading.Lock()
        self._work: deque[_Call] = deque()
        self._wake = threading.Condition(self._lock)
        self._threads = 0
        self._idle = 0
        self._abandoned = 0
        self._closed = False

    # -- what the worker reports -------------------------------------------------------

    @property
    def threads(self) -> int:
        """Threads alive (idle, busy or abandoned)."""
        return self._threads

    @property
    def abandoned_count(self) -> int:
        """Threads held by handlers that ran past their time limit and still run."""
        return self._abandoned

    # -- running a call ----------------------------------------------------------------

    async def run(self, fn: Callable[[], Any], *, timeout: float | None, name: str) -> Any:
        """``fn()`` on a pool thread; its time limit counts from the moment it starts.

        Raises :class:`NotStarted` if no thread took it within ``timeout``, and
        :class:`Expired` if it ran longer than ``timeout``; otherwise returns its result
        or raises its exception.
        """
        loop = asyncio.get_running_loop()
        call = _Call(fn, name, loop, loop.create_future(), loop.create_future())
        self._submit(call)
        try:
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(call.started)
            except TimeoutError:
                with self._lock:
                    if call.thread is None:
                        call.given_up = True
                if call.given_up:
                    raise NotStarted(self._why_not_started(timeout)) from None
            try:
                async with asyncio.timeout(timeout):
                    return await asyncio.shield(call.done)
            except TimeoutError:
                self._abandon(call)
                raise Expired(f"handler exceeded its timeout of {timeout:g}s") from None
        except asyncio.CancelledError:
            with self._lock:
                if call.thread is None:
                    call.given_up = True  # shutdown before it started: never run it
            raise

    def _why_not_started(self, timeout: float | None) -> str:
        return (
            f"no free handler thread within {timeout:g}s: {self._abandoned} of "
            f"{self._threads} threads are held by handlers that ran past their timeout "
            f"(at most {self.max_abandoned} are replaced); the handler did not run"
        )

    def _submit(self, call: _Call) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the handler pool is shut down")
            self._work.append(call)
            limit = self.size + min(self._abandoned, self.max_abandoned)
            if self._idle == 0 and self._threads < limit:
                self._threads += 1
                threading.Thread(
                    target=self._loop, name=f"{THREAD_PREFIX}-{self._threads}", daemon=True
                ).start()
            else:
                self._wake.notify()

    def _abandon(self, call: _Call) -> None:
        with self._lock:
            if call.done.done() or call.abandoned:
                return
            call.abandoned = True
            self._abandoned += 1
            count = self._abandoned
            # a replacement, so that `size` threads stay free for handlers that can run
            if (
                self._work
                and self._idle == 0
                and self._threads < self.size + min(count, self.max_abandoned)
            ):
                self._threads += 1
                threading.Thread(
                    target=self._loop, name=f"{THREAD_PREFIX}-{self._threads}", daemon=True
                ).start()
        if self._on_abandoned is not None:
            self._on_abandoned(call.name, count)

    def _loop(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
                while not self._work and not self._closed:
                    if not self._wake.wait(timeout=60) and not self._work:
                        # idle for a minute with more threads than needed: leave
                        if self._threads - self._abandoned > self.size:
                            self._idle -= 1
                            self._threads -= 1
                            return
                self._idle -= 1
                if self._closed and not self._work:
                    self._threads -= 1
                    return
                call = self._work.popleft()
                if call.given_up:
                    continue
                call.thread = threading.current_thread()
            call.loop.call_soon_threadsafe(_settle, call.started)
            try:
                result = call.fn()
            except BaseException as exc:  # handed to the awaiting task
                self._finish(call, None, exc)
            else:
                self._finish(call, result, None)

    def _finish(self, call: _Call, result: Any, exc: BaseException | None) -> None:
        with self._lock:
            if call.abandoned:
                self._abandoned -= 1
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            call.loop.call_soon_threadsafe(_settle, call.done, result, exc)
            if call.abandoned and self._on_returned is not None:
                call.loop.call_soon_threadsafe(self._report_returned, call.name)

    def _report_returned(self, name: str) -> None:
        # on the loop, with the count as it is now: a report never undoes a later one
        if self._on_returned is not None:
            self._on_returned(name, self._abandoned)

    def shutdown(self) -> None:
        """Start no more calls; idle threads leave (hung ones are daemons)."""
        with self._lock:
            self._closed = True
            for call in self._work:
                call.given_up = True
            self._work.clear()
            self._wake.notify_all()
