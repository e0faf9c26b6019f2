"""One delivery on its way through the worker: the :class:`Job`, and the shape of the
stages it passes through (:data:`Stage`, :class:`Middleware`).

The worker builds one Job where a delivery arrives and hands it to a list of stages
built once from what the app uses (docs/architecture.md, "The stage list"). Each stage
is ``async (job, call_next) -> Outcome``: it may act before and after the rest of the
list (``await call_next(job)``), or answer instead of it with an outcome of its own
(:meth:`Job.ack`, :meth:`Job.retry`, :meth:`Job.dead_letter`, :meth:`Job.requeue`).
A user's middleware (``App(middleware=[...])``, docs/middleware.md) is such a stage.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from ._amqp import headers as h
from ._amqp.properties import message_id_of
from .errors import ConfigurationError, RetryLater
from .outcome import ACK, REQUEUE, DeadLetter, Outcome
from .retry import RetryPolicy, after_exception, after_failure, after_retry_later

if TYPE_CHECKING:
    from .context import Context
    from .handler import Handler


class Delivery(Protocol):
    """The fields of a delivery that rabbitq reads (aio-pika's IncomingMessage has them)."""

    @property
    def body(self) -> bytes: ...
    @property
    def headers(self) -> Mapping[str, Any]: ...
    @property
    def type(self) -> str | None: ...
    @property
    def routing_key(self) -> str | None: ...
    @property
    def exchange(self) -> str | None: ...
    @property
    def message_id(self) -> str | None: ...
    @property
    def correlation_id(self) -> str | None: ...
    @property
    def redelivered(self) -> bool | None: ...
    @property
    def timestamp(self) -> datetime | None: ...


# The longest error text a middleware's outcome carries into the copy's headers.
_MAX_ERROR = 1024


class Job:
    """One delivery, from its arrival to its outcome.

    Read by every stage: ``delivery`` (body, headers, properties), ``queue``,
    ``type_name`` (resolved once), ``attempt`` (read once from ``rabbitq-attempt``),
    ``handler`` (None for a type this queue has no handler for). Filled in on the way:
    ``message`` (the decoded model, once the decode stage ran), ``ctx`` (the handler's
    :class:`~rabbitq.Context`, once the attempt began), ``result`` (what the handler
    returned, kept when the app has middleware). ``state`` is a dict for middleware to
    pass things along.
    """

    __slots__ = (
        "_body",
        "_state",
        "_wrappers",
        "attempt",
        "ctx",
        "delivery",
        "flow",
        "handler",
        "message",
        "queue",
        "result",
        "type_name",
    )

    def __init__(
        self,
        delivery: Delivery,
        queue: str,
        type_name: str,
        attempt: int,
        handler: Handler | None,
    ) -> None:
        self.delivery = delivery
        self.queue = queue
        self.type_name = type_name
        self.attempt = attempt
        self.handler = handler
        self.message: Any = None
        self.ctx: Context | None = None
        self.result: Any = None
        self.flow: Any = None  # a workflow step's part (rabbitq.workflow.steps.Flow)
        self._body: bytes | None = None
        self._state: dict[str, Any] | None = None
        self._wrappers: list[Wrapper] | None = None

    def __repr__(self) -> str:
        return f"<Job {self.type_name} {self.message_id} attempt {self.attempt}>"

    # -- what the delivery says ------------------------------------------------------

    @property
    def body(self) -> bytes:
        """The message body: as it arrived, or as a stage before the decode stage set it
        (decrypted, fetched from a blob store). Retry and DLQ copies keep the arrived one."""
        return self.delivery.body if self._body is None else self._body

    @body.setter
    def body(self, body: bytes) -> None:
        self._body = body

    @property
    def headers(self) -> Mapping[str, Any]:
        """The message's headers (``{}`` without any)."""
        return self.delivery.headers or {}

    @property
    def message_id(self) -> str:
        """The message id (a stand-in derived from the body for a message without one)."""
        return message_id_of(self.delivery, self.type_name)

    @property
    def redelivered(self) -> bool:
        """The broker delivered it before (it may have been handled: at-least-once)."""
        return bool(self.delivery.redelivered)

    @property
    def state(self) -> dict[str, Any]:
        """A dict of the job's own, for middleware to pass values to later stages."""
        if self._state is None:
            self._state = {}
        return self._state

    # -- around the handler call -------------------------------------------------------

    def wrap_call(self, wrapper: Wrapper) -> None:
        """Have the attempt call ``wrapper(call, ctx)()`` instead of ``call()``: for a
        stage that must act inside the once-only section, with the handler's result
        (a workflow step keeps it, and queues a chain's next step, there)."""
        if self._wrappers is None:
            self._wrappers = []
        self._wrappers.append(wrapper)

    @property
    def wrappers(self) -> list[Wrapper] | None:
        """The wrappers :meth:`wrap_call` added, innermost first (None: none)."""
        return self._wrappers

    # -- outcomes a stage may answer with ------------------------------------------------

    def fail(self, failure: Exception, duration: float = 0.0) -> Outcome:
        """The outcome of this attempt having raised ``failure`` (:func:`failed`, with
        the handler's retry policy; the default policy for a type without a handler)."""
        policy = self.handler.retry if self.handler is not None else RetryPolicy()
        return failed(policy, self.type_name, self.attempt, failure, duration)

    def ack(self) -> Outcome:
        """Acknowledge it without running the rest (the handler included)."""
        return Outcome(ACK, self.type_name, self.attempt)

    def requeue(self) -> Outcome:
        """Give it back to its queue (no attempt used); it comes back at once, so use it
        for a short "not now", never for a message that will never succeed."""
        return Outcome(REQUEUE, self.type_name, self.attempt)

    def dead_letter(self, reason: str = "permanent", error: str | None = None) -> Outcome:
        """Send it to the dead-letter queue with ``reason`` (and ``error`` as its text)."""
        text = None if error is None else h.truncate_utf8(error, _MAX_ERROR)
        return Outcome(DeadLetter(reason), self.type_name, self.attempt, error=text)

    def retry(self, error: str | None = None, *, delay: float | None = None) -> Outcome:
        """Count this attempt as failed: the next retry tier of the handler's policy, or
        the DLQ (``exhausted``) when none is left. With ``delay`` (seconds), it waits
        that long in the delay ladder instead of the next tier (as ``RetryLater(delay,
        count_attempt=True)`` from a handler)."""
        if self.handler is None:
            return self.dead_letter("unknown-type", error)
        policy = self.handler.retry
        text = None if error is None else h.truncate_utf8(error, _MAX_ERROR)
        if delay is not None:
            later = RetryLater(delay, count_attempt=True)
            return Outcome(after_retry_later(policy, self.attempt, later), self.type_name,
                           self.attempt, error=text)  # fmt: skip
        decision = after_failure(policy, self.attempt, permanent=False)
        return Outcome(decision, self.type_name, self.attempt, error=text)


def failed(
    policy: RetryPolicy, type_name: str, attempt: int, failure: Exception, duration: float = 0.0
) -> Outcome:
    """The outcome of an ``attempt`` that raised ``failure``: retried or dead-lettered
    as ``policy`` says (pure). Only a dead letter carries the formatted traceback:
    formatting one costs more than the rest of a retry (it reads the source lines of
    every frame); the exception itself rides along (``failure``), for the log line to
    format where it shows one."""
    decision = after_exception(policy, attempt, failure)
    return Outcome(
        decision,
        type_name,
        attempt,
        duration,
        error=h.format_error(failure),
        traceback=h.format_traceback(failure) if isinstance(decision, DeadLetter) else None,
        failure=failure,
    )


Next = Callable[[Job], Awaitable[Outcome]]
"""The rest of the stage list, as a stage sees it: ``await call_next(job)``."""

Stage = Callable[[Job, Next], Awaitable[Outcome]]
"""One step of a delivery: ``async (job, call_next) -> Outcome``."""

DELIVERY_ORDER = ("fetch", "cancelled", "superseded", "decrypt")
"""The stages an app's capabilities add before the decode stage (``App.delivery_stages``),
by their ``name``, in the order they run: the large payload fetched from its blob store
(first, so that it sees every ack, a cancelled message's too, and deletes the blob), a
cancelled message acked unrun, a debounced one superseded by a later publish acked
unrun, the body decrypted."""


def add_stage(stages: Sequence[Stage], stage: Stage) -> tuple[Stage, ...]:
    """``stages`` with ``stage`` in its place by its ``name`` (:data:`DELIVERY_ORDER`)."""
    name = getattr(stage, "name", None)
    if name not in DELIVERY_ORDER:
        raise ValueError(f"unknown delivery stage {name!r}: not one of {DELIVERY_ORDER}")
    kept = [s for s in stages if getattr(s, "name", None) != name]
    return tuple(sorted([*kept, stage], key=lambda s: DELIVERY_ORDER.index(s.name)))  # type: ignore[attr-defined]


Wrapper = Callable[[Callable[[], Awaitable[Any]], "Context"], Callable[[], Awaitable[Any]]]
"""A wrapper of the handler call (:meth:`Job.wrap_call`)."""


class Middleware(Protocol):
    """A user's stage: ``App(middleware=[Timing(), ...])`` (docs/middleware.md).

    ``__call__`` receives the job (the message decoded: ``job.message``) and the rest
    of the list; it returns the outcome, its own or the rest's. It runs in the worker
    and in ``rabbitq.testing`` alike, once per attempt."""

    async def __call__(self, job: Job, call_next: Next) -> Outcome:
        """Act on ``job``; ``return await call_next(job)`` to run the rest."""
        ...


def check_middleware(middleware: Sequence[Middleware]) -> tuple[Middleware, ...]:
    """The app's middleware as a tuple; one that cannot be called is refused now."""
    if isinstance(middleware, str) or not isinstance(middleware, Sequence):
        raise ConfigurationError(
            f"middleware must be a list of middleware objects, not {middleware!r}"
        )
    for item in middleware:
        if not callable(item):
            raise ConfigurationError(
                f"middleware {item!r} is not callable: give objects with "
                "'async def __call__(self, job, call_next)' (docs/middleware.md)"
            )
    return tuple(middleware)
