"""The app's own middleware (``App(middleware=[...])``, docs/middleware.md) as one stage
of the list, held to the stage contract whatever a middleware does, so that a delivery
always comes out with an outcome to settle:

- it returns an outcome: that outcome;
- it returns anything else once its ``call_next`` has returned (``await call_next(job)``
  without ``return``), or returns or drops ``call_next(job)`` un-awaited: the rest's
  outcome (awaited here if need be), and a warning once per middleware;
- it returns anything else without an outcome from ``call_next`` (not called, or still
  running in a task the middleware started): a failed attempt, its error a
  :class:`~rabbitq.errors.MiddlewareError` naming the middleware;
- it raises: a failed attempt, as a handler's exception would be;
- it calls ``call_next`` a second time: refused, a ``MiddlewareError`` raised there (the
  rest of the list, the handler, runs once per attempt); if the middleware lets it
  escape, the first call's outcome stands;
- its own time, before and after ``call_next`` (the rest keeps its own limits), runs
  past the handler's ``timeout``: it is cancelled, a failed attempt
  (:class:`~rabbitq.errors.HandlerTimeout` naming it).

Cancellation (shutdown) and :class:`~rabbitq.errors.HandlerNotStarted` go on up to the
worker, as from any stage.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from typing import Any

from ..errors import HandlerNotStarted, HandlerTimeout, MiddlewareError
from ..job import Job, Next, Stage
from ..outcome import Outcome

log = logging.getLogger("rabbitq.worker")

_ANSWERS = "job.ack(), job.retry(), job.dead_letter() or job.requeue()"


def name_of(middleware: object) -> str:
    """How the logs and errors name a middleware: its function's or its class's name
    (``Outer.Inner``, without a defining function's ``<locals>``)."""
    name = getattr(middleware, "__qualname__", None)
    if not isinstance(name, str):
        name = type(middleware).__qualname__
    return name.rpartition("<locals>.")[2]


def _shown(value: object) -> str:
    """``value`` in a one-line error, short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class MiddlewareStage:
    """The app's middleware in list order, the rest of the list inside the last one."""

    name = "middleware"

    def __init__(self, middleware: Sequence[Stage]) -> None:
        self.middleware = tuple(middleware)
        self.names = tuple(name_of(m) for m in self.middleware)
        self._warned: set[int] = set()  # the middleware warned about (once each)

    def __call__(self, job: Job, call_next: Next) -> Any:
        return _Run(self, job, call_next).run()

    def warn_once(self, index: int, what: str) -> None:
        """Log ``what`` a middleware did wrong, the first time it does."""
        if index not in self._warned:
            self._warned.add(index)
            log.warning("middleware %s %s (logged once)", self.names[index], what)


class _Clock:
    """The middleware's own time: runs while a middleware's code runs, stands still
    while the rest of the list runs; past ``timeout`` it cancels the task.

    One timer per delivery in the common case: a pause only moves the deadline, and the
    timer, if it fires before the moved deadline, sets itself again for it."""

    __slots__ = ("cancelling", "deadline", "done", "expired", "loop", "paused_at", "task", "timer")

    def __init__(self, timeout: float) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.cancelling = task.cancelling()
        self.loop = asyncio.get_running_loop()
        self.deadline = self.loop.time() + timeout
        self.paused_at: float | None = None
        self.expired = False
        self.done = False
        self.timer: asyncio.TimerHandle | None = self.loop.call_at(self.deadline, self._check)

    def pause(self) -> None:
        self.paused_at = self.loop.time()

    def resume(self) -> None:
        if self.paused_at is None or self.done:
            return
        self.deadline += self.loop.time() - self.paused_at
        self.paused_at = None
        if self.timer is None:  # it fired during the pause
            self.timer = self.loop.call_at(self.deadline, self._check)

    def stop(self) -> None:
        """The middleware are done: never cancel the task (it goes on to settle)."""
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _check(self) -> None:
        self.timer = None
        if self.done or self.paused_at is not None:  # resume() sets it again
            return
        if self.loop.time() < self.deadline:
            self.timer = self.loop.call_at(self.deadline, self._check)
            return
        self.expired = True
        self.task.cancel()


class _Run:
    """One delivery through the middleware."""

    __slots__ = ("clock", "current", "job", "rest", "stage")

    def __init__(self, stage: MiddlewareStage, job: Job, rest: Next) -> None:
        self.stage = stage
        self.job = job
        self.rest = rest
        self.current = 0  # the middleware whose own code runs now
        self.clock: _Clock | None = None

    async def run(self) -> Outcome:
        job = self.job
        timeout = job.handler.timeout if job.handler is not None else None
        clock = self.clock = _Clock(timeout) if timeout is not None else None
        try:
            outcome = await self.layer(0, job)
        except asyncio.CancelledError:
            if clock is None or not clock.expired or clock.task.uncancel() > clock.cancelling:
                raise  # not ours: shutdown
            name = self.stage.names[self.current]
            error = HandlerTimeout(
                f"middleware {name} ran past the handler's timeout of {timeout:g}s"
            )
            return job.fail(error)
        finally:
            if clock is not None:
                clock.stop()
        if clock is not None and clock.expired:  # it swallowed our cancellation, answered
            clock.task.uncancel()
        return outcome

    async def layer(self, index: int, job: Job) -> Outcome:
        """Middleware ``index`` on ``job``; past the last one, the rest of the list."""
        middleware = self.stage.middleware
        if index == len(middleware):
            clock = self.clock
            if clock is None:
                return await self.rest(job)
            clock.pause()
            try:
                return await self.rest(job)
            finally:
                clock.resume()
        self.current = index
        call_next = _Next(self, index + 1)
        try:
            result: Any = middleware[index](job, call_next)
            if inspect.isawaitable(result):
                result = await result
        except HandlerNotStarted:
            raise
        except MiddlewareError as exc:
            if exc is call_next.refusal and call_next.outcome is not None:
                self.stage.warn_once(index, "called call_next a second time; the first "
                                     "call's outcome stands")  # fmt: skip
                return call_next.outcome
            return job.fail(exc)
        except Exception as exc:
            return job.fail(exc)
        return await self.checked(index, job, result, call_next)

    async def checked(self, index: int, job: Job, result: object, call_next: _Next) -> Outcome:
        """``result`` as an outcome (the module's docstring says how)."""
        if isinstance(result, Outcome):
            return result
        if call_next.outcome is not None:
            self.stage.warn_once(
                index, f"returned {_shown(result)} after call_next: its outcome is taken "
                "(write `return await call_next(job)`)",
            )  # fmt: skip
            return call_next.outcome
        pending = call_next.pending
        if pending is not None and not call_next.started:  # never awaited: await it here
            self.stage.warn_once(
                index, "did not await call_next(job): awaited for it (write "
                "`return await call_next(job)`)",
            )  # fmt: skip
            return await pending  # type: ignore[no-any-return]
        name = self.stage.names[index]
        if pending is not None:
            error = MiddlewareError(
                f"middleware {name} returned {_shown(result)} before call_next's outcome "
                "came (await it: `return await call_next(job)`)"
            )
        else:
            error = MiddlewareError(
                f"middleware {name} returned {_shown(result)}, not an outcome: "
                f"`return await call_next(job)`, or one of {_ANSWERS}"
            )
        return job.fail(error)


class _Next:
    """The ``call_next`` one middleware is given: the rest of the list, once."""

    __slots__ = ("index", "outcome", "pending", "refusal", "run", "started")

    def __init__(self, run: _Run, index: int) -> None:
        self.run = run
        self.index = index
        self.pending: Any = None  # the awaitable the first call returned
        self.started = False
        self.outcome: Outcome | None = None
        self.refusal: MiddlewareError | None = None

    def __call__(self, job: Job) -> Any:
        if self.pending is not None:
            name = self.run.stage.names[self.index - 1]
            self.refusal = MiddlewareError(
                f"middleware {name} called call_next a second time: the rest of the list "
                "(the handler) runs once per attempt"
            )
            raise self.refusal
        self.pending = self._rest(job)
        return self.pending

    async def _rest(self, job: Job) -> Outcome:
        self.started = True
        try:
            outcome = self.outcome = await self.run.layer(self.index, job)
        finally:
            self.run.current = self.index - 1  # the caller's own code runs again
        return outcome


def middleware_stage(middleware: Sequence[Stage]) -> list[Stage]:
    """The stage list's part for the app's ``middleware``: one stage, or none."""
    return [MiddlewareStage(middleware)] if middleware else []
