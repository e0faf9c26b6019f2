"""The circuits of one worker's handlers (:mod:`rabbitq.breaker`), applied: ``admit``
before a handler, ``record`` after it, and the consumer paused while any circuit is open.

The consumer (:class:`rabbitq._worker.consumer.Consumer`) does the cancelling and the
consuming again, and retries them while the broker will not have them; the guard only
says when the queue is paused for the breaker and when it no longer is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..breaker import CLOSED, HALF_OPEN, OPEN, Breaker, Circuit, State, combined, verdict
from ..handler import Handler
from ..hooks import Hooks
from ..job import Job, Next
from ..outcome import Outcome
from .consumer import BREAKER_OPEN, Pausable

log = logging.getLogger("rabbitq.breaker")


class BreakerGuard:
    """The circuits of one worker's handlers, and the consumer they pause.

    ``clock`` is ``time.monotonic`` outside tests.
    """

    @classmethod
    def wanted(
        cls, queue: str, handlers: Mapping[str, Handler], *, consumer: Pausable, hooks: Hooks
    ) -> BreakerGuard | None:
        """The guard of ``handlers`` that have a ``breaker``; None when none has."""
        breakers = {name: h.breaker for name, h in handlers.items() if h.breaker}
        return cls(queue, breakers, consumer=consumer, hooks=hooks) if breakers else None

    def __init__(
        self,
        queue: str,
        breakers: Mapping[str, Breaker],
        *,
        consumer: Pausable,
        hooks: Hooks,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queue = queue
        self.circuits = {name: Circuit(config) for name, config in breakers.items()}
        self._consumer, self._hooks, self._clock = consumer, hooks, clock
        self._state: State = CLOSED
        self._closed = False
        self._changed = asyncio.Event()  # set whenever any circuit changes state
        self._probes: set[asyncio.Task[Any] | None] = set()  # handlers let through as probes
        self._timers: set[asyncio.TimerHandle] = set()

    @property
    def state(self) -> State:
        """The queue's combined state."""
        return self._state

    async def __call__(self, job: Job, call_next: Next) -> Outcome:
        """The breaker stage: an open circuit returns the delivery to its queue (no
        attempt); what came of the rest is recorded, but for a key busy elsewhere."""
        type_name = job.type_name
        if not await self.admit(type_name):
            return job.requeue()  # circuit open: no attempt
        outcome = await call_next(job)
        if not outcome.busy:
            self.record(type_name, outcome.decision)
        return outcome

    async def admit(self, type_name: str) -> bool:
        """Wait, if needed, until the handler of ``type_name`` may run. False: do not run
        it, return the delivery to the queue (no attempt is counted)."""
        circuit = self.circuits.get(type_name)
        if circuit is None:
            return True
        while not self._closed:
            before = circuit.state
            allowed = circuit.allow(self._clock())
            self._after(type_name, before, circuit)
            if allowed is None:  # every probe is out: wait for their verdict
                self._changed.clear()
                await self._changed.wait()
                continue
            if allowed and circuit.state == HALF_OPEN:
                self._probes.add(asyncio.current_task())
            return allowed
        return False

    def record(self, type_name: str, decision: object) -> None:
        """The handler of ``type_name`` ended with ``decision`` (ack, retry, dead-letter)."""
        circuit = self.circuits.get(type_name)
        if circuit is None:
            return
        task = asyncio.current_task()
        probe = task in self._probes
        self._probes.discard(task)
        before = circuit.state
        circuit.record(verdict(decision), self._clock(), probe=probe)
        self._after(type_name, before, circuit)

    def stop(self) -> None:
        """The worker stops: deliveries waiting for a probe's verdict go back (a
        stage's ``stop``)."""
        self.close()

    def close(self) -> None:
        """The worker is stopping: release every waiting delivery (to be requeued)."""
        self._closed = True
        self._changed.set()
        for timer in self._timers:
            timer.cancel()

    def _after(self, type_name: str, before: State, circuit: Circuit) -> None:
        if circuit.state == before:
            return
        self._changed.set()
        level = logging.WARNING if circuit.state == OPEN else logging.INFO
        log.log(
            level,
            "circuit breaker for %s on %r: %s -> %s%s",
            type_name,
            self.queue,
            before,
            circuit.state,
            f" (pausing for {circuit.config.cooldown:g}s)" if circuit.state == OPEN else "",
        )
        if circuit.state == OPEN:
            loop = asyncio.get_running_loop()
            self._timers = {t for t in self._timers if t.when() > loop.time()}
            self._timers.add(loop.call_later(circuit.config.cooldown, self._cooled_down, type_name))
        state = combined([c.state for c in self.circuits.values()])
        if state == self._state:
            return
        was, self._state = self._state, state
        self._hooks.breaker_changed(self.queue, state)
        if state == OPEN:
            self._consumer.pause(BREAKER_OPEN, f"circuit breaker open for {type_name}")
        elif was == OPEN:
            self._consumer.resume(BREAKER_OPEN)

    def _cooled_down(self, type_name: str) -> None:
        if self._closed:
            return
        circuit = self.circuits[type_name]
        before = circuit.state
        circuit.tick(self._clock())
        self._after(type_name, before, circuit)
