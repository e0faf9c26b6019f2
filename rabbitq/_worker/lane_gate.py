"""Which priority lane's delivery starts next (``App(priorities=N)``, amqp.lanes).

Every lane's consumer holds up to ``prefetch`` deliveries, but only ``prefetch``
handlers run at once across all lanes: a delivery waits here for a handler slot. When
one frees, the lanes that have deliveries waiting share it by weight
(:func:`rabbitq._amqp.lanes.weight`: each level twice the one below), by stride
scheduling: each lane has a pass, advanced by ``STRIDE / weight`` for each delivery it
starts, and the waiting lane with the lowest pass goes next (ties: the higher lane).
So:

- a higher lane is never held behind a backlog of a lower one: its delivery waits at
  most for the slots that run now and its lane's own turn;
- the lowest lane still starts ``weight(0) / sum(weights of the busy lanes)`` of the
  deliveries while higher lanes are busy (with 3 levels all busy: 1/7);
- a lane that is alone uses every slot (no slot is kept for a lane that has nothing):
  an app whose messages are all priority 0 runs as many handlers as without lanes.

A lane that was idle starts again at the current pass, with no credit saved up.
"""

from __future__ import annotations

import asyncio
from collections import deque

from .._amqp.lanes import MAX_PRIORITIES, weight
from ..job import Job, Next
from ..outcome import Outcome

STRIDE = 1 << MAX_PRIORITIES


class LaneGate:
    """``slots`` handler slots shared by ``levels`` lanes, by weight."""

    def __init__(self, slots: int, levels: int) -> None:
        self.free = slots
        self.slots = slots
        self._waiting: list[deque[asyncio.Future[None]]] = [deque() for _ in range(levels)]
        self._pass = [0] * levels
        self._clock = 0
        self.started = [0] * levels
        """Deliveries let in, per lane (what the share tests count)."""

    def waiting(self, level: int) -> int:
        """How many deliveries of lane ``level`` wait for a slot."""
        return sum(1 for f in self._waiting[level] if not f.done())

    async def enter(self, level: int) -> None:
        """Wait for a handler slot for a delivery of lane ``level``."""
        if self.free > 0 and not any(self._waiting):
            self.free -= 1
            self._grant(level)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[level].append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.leave()  # let in as it was cancelled: the slot goes to the next
            else:
                self._forget(level, future)
            raise

    def leave(self) -> None:
        """A delivery that :meth:`enter` let in has ended; the next one goes."""
        self.free += 1
        self._dispatch()

    def _forget(self, level: int, future: asyncio.Future[None]) -> None:
        try:
            self._waiting[level].remove(future)
        except ValueError:
            pass

    def _dispatch(self) -> None:
        while self.free > 0:
            level = self._next()
            if level is None:
                return
            future = self._waiting[level].popleft()
            if future.done():  # cancelled while it waited
                continue
            self.free -= 1
            self._grant(level)
            future.set_result(None)

    def _next(self) -> int | None:
        """The waiting lane with the lowest pass (ties: the highest level)."""
        best: int | None = None
        for level, waiting in enumerate(self._waiting):
            while waiting and waiting[0].done():
                waiting.popleft()
            if not waiting:
                continue
            if best is None or max(self._pass[level], self._clock) <= max(
                self._pass[best], self._clock
            ):
                best = level
        return best

    def _grant(self, level: int) -> None:
        start = max(self._pass[level], self._clock)  # no credit saved while idle
        self._clock = start
        self._pass[level] = start + STRIDE // weight(level)
        self.started[level] += 1


class LaneStage:
    """The stage of lane ``level``'s worker: wait for the gate, run the rest, leave.
    Its ``stop`` lets the waiting deliveries go back to their queue (worker stopping)."""

    name = "priority"

    def __init__(self, gate: LaneGate, level: int) -> None:
        self.gate = gate
        self.level = level
        self._waiting: set[asyncio.Task[object]] = set()

    async def __call__(self, job: Job, call_next: Next) -> Outcome:
        task = asyncio.current_task()
        assert task is not None
        self._waiting.add(task)
        try:
            await self.gate.enter(self.level)
        finally:
            self._waiting.discard(task)
        try:
            return await call_next(job)
        finally:
            self.gate.leave()

    def stop(self) -> None:
        """The worker stops: deliveries still waiting for a slot go back (nack)."""
        for task in list(self._waiting):
            task.cancel()
