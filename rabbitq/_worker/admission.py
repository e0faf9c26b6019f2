"""What the worker asks before a handler runs: its limits first, then a handler slot.

Without limited handlers this is not used at all: the broker's prefetch alone bounds
the handlers in flight, as before. With one or more, the worker keeps two bounds:

- **handler slots**: at most ``prefetch`` handlers run at once (the meaning of
  ``prefetch`` does not change);
- **the broker's prefetch** is raised to ``prefetch + waiting_room`` (by default
  ``2 * prefetch``), and bounds everything the worker holds: running, waiting for a
  limit, and settling.

A delivery of a limited handler first waits in its :class:`~rabbitq.ratelimit.Gate`
(rate slot, concurrency cap) *without* a handler slot, then takes one. So a provider
at its quota holds at most the waiting room, never the slots that other message
types in the same queue need; nothing is retried, requeued or dead-lettered for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from ..app import App
from ..hooks import Hooks
from ..job import Job, Next
from ..outcome import Outcome
from ..ratelimit import LocalRates
from ..ratelimit.gate import Gate, Limit, RateBackend


class Admission:
    """The gates of an app's limited handlers (``limits``: type name -> its Limit or
    None) and the worker's handler slots."""

    def __init__(
        self,
        queue: str,
        limits: Mapping[str, Limit | None],
        *,
        prefetch: int,
        hooks: Hooks,
        waiting_room: int | None = None,
        local: RateBackend | None = None,
    ) -> None:
        self.queue = queue
        self.hooks = hooks
        self.local = local or LocalRates()
        self.gates: dict[str, Gate] = {}
        for name, limit in limits.items():
            if limit is None:
                continue
            self.gates[name] = Gate(
                limit.key,
                rate=limit.rate,
                backend=limit.backend or self.local,
                concurrency=limit.concurrency,
            )
        self.prefetch = prefetch
        self.waiting_room = (prefetch if waiting_room is None else waiting_room) if self else 0
        self._slots = asyncio.Semaphore(prefetch)
        self._waiting: set[asyncio.Task[object]] = set()  # tasks inside enter()

    @classmethod
    def for_app(cls, app: App, *, prefetch: int, hooks: Hooks) -> Admission:
        """The admission of ``app``'s handlers, with its ``limit_waiting``."""
        limits = {name: handler.limit for name, handler in app.handlers.items()}
        waiting = app.limit_waiting
        return cls(app.queue, limits, prefetch=prefetch, hooks=hooks, waiting_room=waiting)

    def __bool__(self) -> bool:
        """Whether any handler is limited (else the worker need not ask)."""
        return bool(self.gates)

    @property
    def broker_prefetch(self) -> int:
        """The prefetch to ask the broker for: handler slots plus the waiting room."""
        return self.prefetch + self.waiting_room

    async def __call__(self, job: Job, call_next: Next) -> Outcome:
        """The admission stage: the delivery waits for its limits and a handler slot
        (cancelled while it waits: the worker returns it); a shared limiter that is down
        is a failed attempt."""
        type_name = job.type_name
        try:
            await self.enter(type_name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return job.fail(exc)
        try:
            return await call_next(job)
        finally:
            self.leave(type_name)

    def stop(self) -> None:
        """The worker stops: deliveries waiting for their turn go back (a stage's
        ``stop``)."""
        self.cancel_waiting()

    async def aclose(self) -> None:
        """The worker closes: the shared limiters' connections (a stage's ``aclose``)."""
        await self.close()

    async def enter(self, type_name: str) -> None:
        """Wait for ``type_name``'s limits (if any), then for a handler slot."""
        task = asyncio.current_task()
        assert task is not None
        self._waiting.add(task)
        try:
            await self._enter(type_name)
        finally:
            self._waiting.discard(task)

    def cancel_waiting(self) -> None:
        """Cancel every task still waiting in :meth:`enter` (on shutdown: they had not
        started, so they go back to the queue now rather than after the grace period)."""
        for task in list(self._waiting):
            task.cancel()

    async def _enter(self, type_name: str) -> None:
        gate = self.gates.get(type_name)
        if gate is not None:
            waited = await gate.enter()
            self.hooks.limit_waited(self.queue, type_name, waited)
            self.hooks.limit_running(self.queue, type_name, gate.running)
        try:
            await self._slots.acquire()
        except BaseException:
            if gate is not None:
                self._leave_gate(gate, type_name)
            raise

    def leave(self, type_name: str) -> None:
        """The handler that :meth:`enter` let in has ended."""
        self._slots.release()
        gate = self.gates.get(type_name)
        if gate is not None:
            self._leave_gate(gate, type_name)

    def _leave_gate(self, gate: Gate, type_name: str) -> None:
        gate.leave()
        self.hooks.limit_running(self.queue, type_name, gate.running)

    async def close(self) -> None:
        """Stop the shared caps' renewals, then close the shared backends' connections."""
        for gate in self.gates.values():
            await gate.close()
        backends = {id(g.backend): g.backend for g in self.gates.values()}
        for backend in backends.values():
            await backend.close()
