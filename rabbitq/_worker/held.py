"""Deliveries held past every bound: how ``/readyz`` sees a worker that takes nothing.

From the middleware on, every part of a delivery's way is bounded: the middleware's own
time and the handler by the handler's ``timeout``, a batch's wait by its ``max_wait``,
and the settling after it (an ack; a copy, held back by the broker only while the
consumer says so). A delivery held longer than that plus :data:`HELD_GRACE` is a fault:
a middleware that swallows its cancellation, a stage that hangs. Each one keeps a
prefetch slot, and once they hold them all the worker takes nothing more, so the
worker's health reports them (:meth:`Held.health`), counted from the moment the delivery
reached this stage until it is settled (:meth:`Held.settled`). A handler without a
``timeout`` has no bound, and its deliveries are not watched.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from ..handler import Handler
from ..job import Job, Next

HELD_GRACE = 30.0
"""Seconds past its bound before a held delivery makes the worker unready."""


def bound_of(handler: Handler | None) -> float | None:
    """How long a delivery of ``handler`` may take from the middleware on, settling
    aside (pure): its timeout, twice (the middleware's own time, then the handler's),
    and a batch's ``max_wait``; None without a timeout."""
    if handler is None or handler.timeout is None:
        return None
    wait = handler.batch.max_wait if handler.batch is not None else 0.0
    return 2 * handler.timeout + wait


def held_reason(deadlines: Iterable[float], now: float) -> str | None:
    """Why the worker is not ready given the deliveries' deadlines (pure), or None."""
    late = [now - deadline for deadline in deadlines if deadline < now]
    if not late:
        return None
    return (
        f"{len(late)} deliveries held unsettled past their handler's timeout "
        f"(the longest {max(late):.0f}s past it and the grace): the worker may take "
        "nothing more (a middleware or handler that ignores its cancellation?)"
    )


class Held:
    """The stage that starts each delivery's clock, and the worker's watch of them."""

    name = "held"

    def __init__(self, grace: float = HELD_GRACE) -> None:
        self.grace = grace
        self._deadlines: dict[Job, float] = {}

    def __call__(self, job: Job, call_next: Next) -> Any:
        bound = bound_of(job.handler)
        if bound is not None:
            self._deadlines[job] = time.monotonic() + bound + self.grace
        return call_next(job)

    def settled(self, job: Job) -> None:
        """``job``'s delivery is settled (or returned): no longer held."""
        self._deadlines.pop(job, None)

    def health(self) -> str | None:
        """:func:`held_reason` now; safe from any thread."""
        return held_reason(tuple(self._deadlines.values()), time.monotonic())
