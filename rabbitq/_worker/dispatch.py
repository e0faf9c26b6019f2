"""The core of a delivery's way: the :class:`~rabbitq.job.Job` built where it arrives
(:func:`new_job`), the stage list run as one call (:func:`compose`), and the two stages
every app has: :func:`decode` (the type's handler and the body's model, or a dead
letter ``unknown-type`` / ``invalid``) and :class:`Attempt`, the last one (the
context, the handler run once per key, its failure classified by
:func:`~rabbitq._worker.outcome.failed`).

No feature is imported here: each feature's stage lives in the feature's own module,
and :mod:`rabbitq._worker.stages` lists them. No broker I/O happens here either: the
worker (:mod:`rabbitq._worker.lifecycle`) settles the outcome with the broker, and
``rabbitq.testing`` runs the same list without a broker.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from .._amqp import headers as h
from ..context import Context
from ..effects.guard import (
    BUSY_ELSEWHERE,
    DUPLICATE,
    Effects,
    Send,
    busy_decision,
    key_of,
    run_once,
)
from ..effects.store import lease_for
from ..errors import ConfigurationError, DecodeError, HandlerNotStarted
from ..handler import Handler
from ..hooks import UNKNOWN
from ..job import Delivery, Job, Next, Stage, failed
from ..ladder.plan import PREFIX as LADDER_PREFIX
from ..message import decode as decode_body
from ..outcome import ACK, DeadLetter, Outcome
from ..retry import INVALID, UNKNOWN_TYPE, not_started, parse_attempt
from .handler_call import call_handler
from .handler_pool import HandlerPool

__all__ = ["Delivery", "attempt_of", "compose", "new_job", "resolve_type"]


def resolve_type(delivery: Delivery, queue: str) -> str:
    """The type name: the ``type`` property, else the routing key (other producers)."""
    if delivery.type:
        return delivery.type
    key = delivery.routing_key or ""
    if key == queue:
        # Published straight to the queue (or back from a retry queue) without ``type``:
        # the queue's name says nothing, the original routing key may.
        return h.text_header(delivery.headers or {}, h.ORIGINAL_ROUTING_KEY) or key
    return key


def attempt_of(delivery: Delivery) -> int:
    """The delivery's attempt number (its ``rabbitq-attempt`` header; 1 without one)."""
    return parse_attempt((delivery.headers or {}).get(h.ATTEMPT))


def routed_as_another(delivery: Delivery, handlers: Mapping[str, Handler]) -> bool:
    """Whether ``delivery`` came in by this queue's binding for one type but names
    another in its ``type`` property (pure): its routing key is a type the queue handles
    (so bound for), and not its own. Such a message is not handled as either: the
    binding let in the routing key's type, and the body claims another (a producer whose
    topic permissions allow the one key could otherwise reach the other's handler)."""
    routed, claimed = delivery.routing_key, delivery.type
    return bool(claimed and routed and routed != claimed and routed in handlers)


def new_job(handlers: Mapping[str, Handler], queue: str, delivery: Delivery) -> Job:
    """The :class:`Job` of ``delivery``: its type resolved and its attempt read, once.
    A delivery :func:`routed_as_another` type has no handler (``unknown-type``)."""
    type_name = resolve_type(delivery, queue)
    handler = None if routed_as_another(delivery, handlers) else handlers.get(type_name)
    return Job(delivery, queue, type_name, attempt_of(delivery), handler)


class _Link:
    """One stage bound to the rest of the list: ``link(job)`` runs ``stage(job, rest)``."""

    __slots__ = ("rest", "stage")

    def __init__(self, stage: Stage, rest: Next) -> None:
        self.stage = stage
        self.rest = rest

    def __call__(self, job: Job) -> Any:
        return self.stage(job, self.rest)


def compose(stages: Sequence[Stage], last: Next) -> Next:
    """The stage list as one call: ``stages[0]`` first, ``last`` at the end."""
    call = last
    for stage in reversed(stages):
        call = _Link(stage, call)
    return call


async def answered(outcome: Outcome) -> Outcome:
    """``outcome`` as the awaitable a stage returns when it answers without awaiting
    anything (a stage that passes the job on returns ``call_next(job)`` itself: no
    coroutine of its own on the hot path)."""
    return outcome


def decode(job: Job, call_next: Next) -> Awaitable[Outcome]:
    """The core's first stage: no handler -> dead letter ``unknown-type``; a body over
    ``max_body_size`` (checked before parsing: a huge body must not cost a parse) or
    one that is not a valid model -> dead letter ``invalid``; else ``job.message``,
    and the rest of the list."""
    outcome = _undecodable(job)
    return call_next(job) if outcome is None else answered(outcome)


def _undecodable(job: Job) -> Outcome | None:
    handler = job.handler
    if handler is None:
        error = f"UnknownType: no handler for type {job.type_name!r} on queue {job.queue!r}"
        delivery = job.delivery
        routed, claimed, exchange = delivery.routing_key, delivery.type, delivery.exchange
        from_ladder = (exchange or "").startswith(LADDER_PREFIX + ".")  # routed by bits
        if claimed and routed and routed != claimed and exchange and not from_ladder:
            error += (
                f" routed by key {routed!r} (a message is handled only as the type "
                "its routing key names)"
            )
        return Outcome(
            DeadLetter(UNKNOWN_TYPE),
            UNKNOWN,
            job.attempt,
            error=h.truncate_utf8(error, h.MAX_ERROR_BYTES),
        )
    body = job.body
    if handler.max_body_size is not None and len(body) > handler.max_body_size:
        error = (
            f"BodyTooLarge: body is {len(body)} bytes, above max_body_size "
            f"{handler.max_body_size}"
        )
        return Outcome(DeadLetter(INVALID), job.type_name, job.attempt, error=error)
    try:
        job.message = decode_body(body, handler.model)
    except DecodeError as exc:
        return Outcome(DeadLetter(INVALID), job.type_name, job.attempt, error=h.format_error(exc))
    return None


async def cannot_send(follow_ups: Any) -> None:
    """The ``send`` of a list run where nothing can be published."""
    if follow_ups:
        raise ConfigurationError("ctx.publish() needs a worker (or rabbitq.testing) to send")


async def _keeping(job: Job, call: Any) -> Any:
    result = job.result = await call()
    return result


# A key busy elsewhere, for a handler without retry tiers, is claimed again this often.
BUSY_RECLAIM = 1.0


class Attempt:
    """The last stage: one attempt of the handler, once per key (the idempotency store
    of :func:`rabbitq.effects.guard.run_once`), its follow-ups sent with confirms
    (``send``) or written to ``outbox`` inside ``ctx.transaction()``.

    ``asyncio.CancelledError`` (shutdown) propagates; every other exception is an
    outcome. A sync handler that found no free thread in a :class:`HandlerPool` did not
    run: it is retried as the same attempt, or (no retry tiers) :class:`HandlerNotStarted`
    propagates for the worker to return the message.
    """

    __slots__ = ("executor", "keep_result", "outbox", "send")

    def __init__(
        self,
        send: Send = cannot_send,
        outbox: Any = None,
        executor: Executor | HandlerPool | None = None,
        *,
        keep_result: bool = False,
    ) -> None:
        self.send = send
        self.outbox = outbox
        self.executor = executor
        self.keep_result = keep_result

    async def __call__(self, job: Job) -> Outcome:
        handler = job.handler
        assert handler is not None  # the decode stage saw to it
        type_name, attempt = job.type_name, job.attempt
        started = time.perf_counter()
        try:
            ctx = job.ctx = self.context(job, handler)
            effects = ctx.effects
            assert effects is not None
            call = self.call(job, handler, ctx)
            lease = lease_for(handler.timeout)
            verdict = await run_once(effects, call, self.send, lease=lease)
            busy = busy_decision(handler.retry, attempt) if verdict == BUSY_ELSEWHERE else None
            while verdict == BUSY_ELSEWHERE and busy is None:  # no retry tier to wait in
                await asyncio.sleep(BUSY_RECLAIM)
                verdict = await run_once(effects, call, self.send, lease=lease)
        except HandlerNotStarted as exc:
            retry = not_started(handler.retry, attempt)
            if retry is None:
                raise
            return Outcome(retry, type_name, attempt, 0.0, error=h.format_error(exc))
        except Exception as failure:
            return failed(handler.retry, type_name, attempt, failure, time.perf_counter() - started)
        if verdict == DUPLICATE:
            return Outcome(ACK, type_name, attempt, time.perf_counter() - started, duplicate=True)
        if busy is not None and verdict == BUSY_ELSEWHERE:
            error = f"KeyBusy: key {effects.key!r} is being handled by another worker"
            return Outcome(busy, type_name, attempt, error=h.truncate_utf8(error, 1024), busy=True)
        return Outcome(ACK, type_name, attempt, time.perf_counter() - started)

    def call(self, job: Job, handler: Handler, ctx: Context) -> Any:
        """The handler call, inside the wrappers stages asked for (``job.wrap_call``);
        with :attr:`keep_result` (the app has middleware, which may read it) the
        handler's return value is kept in ``job.result``."""
        call: Any = functools.partial(call_handler, handler, job.message, ctx, self.executor)
        if self.keep_result:
            call = functools.partial(_keeping, job, call)
        for wrapper in job.wrappers or ():
            call = wrapper(call, ctx)
        return call

    def context(self, job: Job, handler: Handler) -> Context:
        """The handler's ``ctx``; the idempotency key is the handler's (it may raise)."""
        delivery = job.delivery
        message_id = job.message_id
        effects = Effects(
            message_id=message_id,
            correlation_id=delivery.correlation_id,
            key=key_of(handler.key, job.message, message_id),
            store=handler.idempotency,
            outbox=self.outbox,
            check=getattr(self.send, "check", None),  # the worker's: effects.sender
        )
        return Context(
            message_id=message_id,
            attempt=job.attempt,
            max_attempts=handler.retry.attempts,
            redelivered=bool(delivery.redelivered),
            headers=delivery.headers or {},
            correlation_id=delivery.correlation_id,
            queue=job.queue,
            type=job.type_name,
            routing_key=delivery.routing_key or "",
            timestamp=delivery.timestamp,
            effects=effects,
            flow=job.flow,
            cancel_flag=job.cancel_flag,
        )
