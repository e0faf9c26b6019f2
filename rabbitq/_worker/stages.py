"""The stage list, in one place: which stages a delivery passes through, in which order,
built once from what the app uses (as dramatiq's ``default_middleware``).

In the worker (:func:`for_worker`)::

    admission   limits and handler slots         worker/admission.py     limited handlers
    running     the in-handler count and hooks   worker/lifecycle.py     always
    breaker     an open circuit requeues         worker/breaker_guard.py handlers with a breaker
    ordering    one message of a key at a time   worker/ordering.py      ordered handlers
    fetch       a large payload's blob           App(...) capabilities   as the app uses
    cancelled   a cancelled message, acked       App.delivery_stages     them, in
    superseded  a debounced one, acked           (job.DELIVERY_ORDER)    this order
    decrypt     an encrypted body
    workflow    chains and chords                workflow/steps.py       always (cheap)
    decode      unknown type, invalid body       worker/dispatch.py      always
    held        its clock for /readyz starts     worker/held.py          the worker's
    middleware  the app's own, as one stage      worker/middleware.py    as given
    batch       waits for its batch              worker/batching.py      batch handlers
    attempt     once per key, the handler        worker/dispatch.py      always (the last)

``rabbitq.testing`` runs :func:`for_testing`: the same list from ``fetch`` on, without
a broker (a batch handler's message runs as a batch of one).

A stage may also take part in the worker's lifecycle, by having any of:
``arrive(job)`` (called as the delivery arrives, before any await; it returns a
callback for when the delivery is settled, or None), ``stop()`` (the worker stops
taking deliveries: let the waiting ones go), ``async aclose()`` (the worker closes),
and for a stage that holds deliveries in order, ``freeze()`` and an ``idle`` event
(a partition's worker stopping in order: ``Worker.drain_then_close``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..effects.guard import Send
from ..handler import Handler
from ..job import Job, Next, Stage
from ..workflow.chords import ChordStore
from ..workflow.steps import WorkflowStage
from .batching import alone
from .dispatch import Attempt, cannot_send, compose, decode
from .middleware import middleware_stage


class Pipeline:
    """A built stage list: ``await pipeline.run(job)``, and the stages' lifecycle parts."""

    def __init__(self, stages: Sequence[Stage], last: Attempt) -> None:
        self.stages = tuple(stages)
        self.run: Next = compose(self.stages, last)
        self.arrivals: tuple[Callable[[Job], Any], ...] = tuple(self._parts("arrive"))

    def stop(self) -> None:
        """The worker stops taking deliveries: every stage lets its waiting ones go."""
        for stop in self._parts("stop"):
            stop()

    def freeze(self) -> None:
        """Start nothing more (a partition's worker stopping in order): each stage that
        holds deliveries (ordering) keeps them unstarted."""
        for freeze in self._parts("freeze"):
            freeze()

    async def idle(self) -> None:
        """Until no stage that holds deliveries has one inside the rest of the list."""
        for idle in self._parts("idle"):
            await idle.wait()

    async def aclose(self) -> None:
        """The worker closes: every stage closes what it holds."""
        for aclose in self._parts("aclose"):
            await aclose()

    def _parts(self, name: str) -> list[Any]:
        """The stages' ``name`` attributes, for the stages that have one."""
        return [part for s in self.stages if (part := getattr(s, name, None)) is not None]


def _core(
    handlers: Iterable[Handler],
    chords: ChordStore | None,
    send: Send,
    middleware: Sequence[Stage],
    batches: Stage,
    capabilities: Sequence[Stage],
    held: Stage | None = None,
) -> list[Stage]:
    """From ``control`` on: the part of the list the worker and the tests share (the
    worker's ``held`` watch, if given, right after decode)."""
    stages: list[Stage] = [*capabilities, WorkflowStage(chords, send), decode]
    if held is not None:
        stages.append(held)
    stages += middleware_stage(middleware)  # held to the stage contract (worker/middleware)
    if any(handler.batch is not None for handler in handlers):
        stages.append(batches)
    return stages


def for_worker(
    handlers: Iterable[Handler],
    *,
    before: Sequence[Stage | None],
    middleware: Sequence[Stage],
    batches: Stage,
    send: Send,
    outbox: Any,
    executor: Any,
    chords: ChordStore | None,
    capabilities: Sequence[Stage] = (),
    held: Stage | None = None,
) -> Pipeline:
    """The worker's list: its own stages (``before``: admission, running, breaker,
    ordering; None for one the app does not use), then the shared part
    (``capabilities``: the app's ``delivery_stages``), with ``held`` after decode."""
    handlers = list(handlers)
    stages = [s for s in before if s is not None]
    stages += _core(handlers, chords, send, middleware, batches, capabilities, held)
    return Pipeline(stages, Attempt(send, outbox, executor, keep_result=bool(middleware)))


def for_testing(
    handlers: Iterable[Handler],
    *,
    middleware: Sequence[Stage],
    send: Send = cannot_send,
    outbox: Any = None,
    batches: Stage = alone,
    capabilities: Sequence[Stage] = (),
) -> Pipeline:
    """``rabbitq.testing``'s list: the worker's without its broker-bound stages."""
    handlers = list(handlers)
    last = Attempt(send, outbox, keep_result=bool(middleware))
    return Pipeline(_core(handlers, None, send, middleware, batches, capabilities), last)
