"""Storing a failed delivery's copy (:mod:`rabbitq._amqp.copy` says what it carries and
where it goes) until the broker has it, or handing it back (:class:`CopyStore`), and
the log line and hook once it is stored (:func:`report_copied`): a failed attempt's line
carries its traceback on the message's first attempt, and on every attempt at DEBUG
(formatted by logging only if the line is written).

A copy must be confirmed before its original is acked. What the worker does when the
broker does not take it decides whether a message is lost, loops or waits (issue 11):

- **unroutable** (one of the app's own queues is gone: deleted by an operator): the
  worker owns its topology, so it declares it again (``redeclare``: logged, counted)
  and sends the copy once more. Returning the original instead made a hot loop of
  handler runs on classic queues, and on quorum queues burnt the delivery limit.
- **refused** (``basic.nack``: the DLQ or a retry queue is full and declared
  ``x-overflow: reject-publish``) or **not confirmed within** ``deadline`` (the broker
  blocks publishers under a resource alarm): the message is *held*. The consumer is
  paused while any message is held (no new deliveries), the copy is sent again with a
  backoff (0.5 s doubling to 10 s), and readiness and a metric say why. Requeueing
  instead would, on quorum queues, count every return toward the delivery limit until
  the broker dead-lettered the message into the same full DLQ.
- **interrupted** (the connection or channel went away): raised to the worker, which
  returns the original; the broker redelivers it anyway.

A copy sent again after a lost confirm may be stored twice: at-least-once, as always.

RabbitMQ 3.10 keeps refusing, on the channel that was refused, every later publish to
a quorum queue that once rejected one, even after the queue has room again (measured:
the same channel still refused after the limit was lifted and the queue drained; a new
channel was accepted at once). So a held copy is sent again on a new channel
(``renew``), which then serves every later copy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aio_pika.abc import AbstractChannel
from pamqp.commands import Basic

from .._amqp import headers as h
from .._amqp.confirm import send_confirmed
from .._amqp.topology import Topology
from ..crypto.stages import EncryptedFailure
from ..errors import PublishInterrupted, PublishNacked, RetryLater, Unroutable
from ..hooks import UNKNOWN, UNROUTABLE_COPY, Hooks
from ..outcome import DeadLetter, Outcome, Retry, delay_label
from .consumer import COPIES_HELD, Pausable
from .delivery import Incoming
from .dispatch import resolve_type

log = logging.getLogger("rabbitq.worker")

COPY_DEADLINE = 30.0
"""Seconds a copy may wait for its confirm before it is sent again (and held)."""
HOLD_FIRST_WAIT = 0.5
HOLD_MAX_WAIT = 10.0


def hold_waits(first: float = HOLD_FIRST_WAIT, cap: float = HOLD_MAX_WAIT) -> Iterable[float]:
    """0.5, 1, 2, 4, 8, 10, 10, ... seconds between attempts to store a held copy."""
    wait = first
    while True:
        yield wait
        wait = min(wait * 2, cap)


class CopyStore:
    """Sends one app's copies and holds those the broker does not take yet.

    ``channel()`` is the confirming channel to publish on; ``redeclare(reason)`` declares
    the app's topology again; ``consumer`` is paused while any copy is held, and tells
    when the worker stops (a held copy then gives up, and its original goes back to the
    queue). ``arguments``: the app's queues and the arguments they are declared with (to
    word a refusal by what is known, :func:`nack_reason`).
    """

    def __init__(
        self,
        queue: str,
        own_queues: Iterable[str],
        *,
        channel: Callable[[], AbstractChannel | None],
        redeclare: Callable[[str], Awaitable[None]],
        consumer: Pausable,
        renew: Callable[[], Awaitable[None]],
        hooks: Hooks,
        deadline: float = COPY_DEADLINE,
        arguments: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.queue = queue
        self.own_queues = frozenset(own_queues)
        self.arguments = dict(arguments or {})  # own queues' declared arguments
        self._channel = channel
        self._redeclare = redeclare
        self._consumer = consumer
        self._renew = renew
        self._hooks = hooks
        self.deadline = deadline
        self.held = 0
        self.reason: str | None = None

    async def store(
        self, target: str, body: bytes, properties: Basic.Properties, *, exchange: str = ""
    ) -> None:
        """Return once the copy to ``target`` (a queue; with ``exchange``, the routing
        key there) is confirmed; raise PublishInterrupted if the connection went away (or
        the worker stops while the copy is held)."""
        waits = iter(hold_waits())
        redeclared = False
        holding = False
        try:
            while True:
                channel = self._channel()
                if channel is None:
                    raise PublishInterrupted("not connected: the copy was not sent")
                try:
                    async with asyncio.timeout(self.deadline):
                        await send_confirmed(channel, exchange, target, body, properties)
                    return
                except Unroutable:
                    if (exchange or target) in self.own_queues and not redeclared:
                        await self._redeclare(UNROUTABLE_COPY)
                        redeclared = True
                        continue
                    reason = f"{exchange or target} does not exist, even after declaring it again"
                except PublishNacked:
                    reason = nack_reason(exchange or target, self.arguments.get(exchange or target))
                except TimeoutError:
                    reason = (
                        f"no confirm for the copy to {target} within {self.deadline:g}s "
                        "(is the broker blocking publishers?)"
                    )
                if self._consumer.stopping:
                    raise PublishInterrupted(f"stopping while the copy was held: {reason}")
                if not holding:
                    holding = True
                    self._hold(+1, reason)
                redeclared = False
                await asyncio.sleep(next(waits))
                await self._renew()
                if self._consumer.stopping:
                    raise PublishInterrupted(f"stopping while the copy was held: {reason}")
        finally:
            if holding:
                self._hold(-1, None)

    def _hold(self, change: int, reason: str | None) -> None:
        self.held += change
        if change > 0:
            self.reason = reason
            log.warning(
                "holding a message of %r: %s; consuming paused, the copy is retried",
                self.queue,
                reason,
            )
        self._hooks.copies_held(self.queue, self.held, self.reason if self.held else None)
        if self.held:
            self._consumer.pause(COPIES_HELD, f"holding messages of {self.queue}: {self.reason}")
        else:
            self.reason = None
            log.warning("no message of %r held any more: consuming again", self.queue)
            self._consumer.resume(COPIES_HELD)


def report_copied(
    hooks: Hooks, queue: str, delivery: Incoming, outcome: Outcome, target: str
) -> None:
    """Log and report a delivery whose copy was confirmed and whose ack was sent."""
    decision = outcome.decision
    if isinstance(decision, Retry):
        log.info(
            "message %s (%s) %s attempt %d%s, retrying in %s: %s",
            delivery.message_id or "-",
            outcome.type_name,
            "deferred (key busy elsewhere)"
            if outcome.busy
            else "deferred (RetryLater)"
            if decision.deferred
            else "failed",
            outcome.attempt,
            _took(outcome),
            f"{delay_label(decision.delay_ms)} (delay ladder)"
            if decision.ladder
            else decision.label,
            _shown_error(outcome.error),
            exc_info=_shown_failure(outcome),
        )
        hooks.retried(queue, outcome.type_name, decision.label, outcome.duration)
    else:
        assert isinstance(decision, DeadLetter)
        log.warning(
            "message %s (%s) dead-lettered to %s (%s%s): %s",
            delivery.message_id or "-",
            _shown_type(outcome, delivery, queue),
            target,
            decision.reason,
            f": attempt {outcome.attempt} failed{_took(outcome)}" if outcome.failure else "",
            _shown_error(outcome.error),
            exc_info=_shown_failure(outcome),
        )
        hooks.dead_lettered(queue, outcome.type_name, decision.reason, outcome.duration)


def _shown_error(error: str | None) -> str | None:
    """An encrypted app's error as the log shows it: ``ValueError: encrypted (key k2)``
    (its text only at DEBUG, where the exception itself is logged)."""
    return h.described(error) if error is not None and "enc:" in error else error


def _took(outcome: Outcome) -> str:
    """``" after 0.012s"``: how long a failed attempt ran (nothing for a line whose
    handler did not run: a bad payload, a middleware's answer)."""
    return "" if outcome.failure is None else f" after {outcome.duration:.3f}s"


def _shown_failure(outcome: Outcome) -> BaseException | None:
    """The exception whose traceback a line shows: a failed attempt's on the message's
    first attempt (once per message) and on every attempt when debugging; None for a
    RetryLater (not a failure) and otherwise, so that nothing is formatted."""
    failure = outcome.failure
    if failure is None or isinstance(failure, RetryLater | EncryptedFailure):
        return None
    return failure if outcome.attempt == 1 or log.isEnabledFor(logging.DEBUG) else None


def _shown_type(outcome: Outcome, delivery: Incoming, queue: str) -> str:
    """The type a log line names: the one the producer sent, even where metrics say
    ``unknown`` to keep their labels bounded (at most 200 characters of it)."""
    if outcome.type_name != UNKNOWN:
        return outcome.type_name
    return resolve_type(delivery, queue)[:200] or UNKNOWN


LENGTH_LIMITS = ("x-max-length", "x-max-length-bytes")


def nack_reason(target: str, arguments: Mapping[str, Any] | None) -> str:
    """Why the broker nacked a copy to ``target``, in words, by what is known of it
    (pure): ``arguments`` are its declared ones (None: not a queue of the app's own).
    A nack means the broker did not store the message: a queue full under its length
    limit (``x-overflow: reject-publish``), or a quorum queue without a reachable
    leader (a partition), among others; only a declared limit makes it "full"."""
    if arguments is None:
        return (
            f"the broker did not store the copy to {target} (a nack: full if it has a "
            "length limit, else no quorum leader reachable?)"
        )
    if any(key in arguments for key in LENGTH_LIMITS):
        return f"{target} refused the copy (full: its length limit)"
    return (
        f"the broker did not store the copy to {target} (a nack; it is declared without "
        "a length limit: no quorum leader reachable? or a max-length policy)"
    )


def own_arguments(topology: Topology) -> dict[str, Mapping[str, Any]]:
    """The app's queues and the arguments each is declared with (pure)."""
    return {q.name: q.arguments for q in topology.queues}


def own_targets(topology: Topology) -> list[str]:
    """The queues and exchanges of ``topology`` that the worker declares again when a
    copy to one of them is unroutable: its queues, and the delay ladder's exchanges."""
    return [
        *(q.name for q in topology.queues),
        *topology.ladder.exchanges,
        topology.ladder.deliver_exchange,
    ]


def close_later(channel: AbstractChannel, delay: float) -> None:
    """Close a replaced copy channel once the copies in flight on it had ``delay``."""

    def close() -> None:
        task = asyncio.ensure_future(channel.close())
        _closing.add(task)
        task.add_done_callback(_closing.discard)

    asyncio.get_running_loop().call_later(delay, close)


_closing: set[asyncio.Future[Any]] = set()  # referenced until done
