"""Limits the broker enforces on a consumer, and the start-up check against them.

RabbitMQ closes a channel whose oldest unacknowledged delivery is older than its
``consumer_timeout`` (30 minutes by default; PRECONDITION_FAILED, "delivery
acknowledgement on channel N timed out"), and every unacked delivery on it goes back
to the queue. The worker survives that (aio-pika reopens the channel and consumes
again; the message is redelivered), but a handler that always runs longer than the
broker allows would be redelivered for ever. So each handler's ``timeout`` must stay
below the broker's ``consumer_timeout``.

AMQP does not tell a client the broker's ``consumer_timeout``, so the worker does
not guess from the wire: it uses the value you give (``RABBITQ_CONSUMER_TIMEOUT`` or
``rabbitq worker --consumer-timeout``, seconds; ``0`` for a broker that has none),
else RabbitMQ's default, and says in its start-up log which one it used.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..handler import Handler

log = logging.getLogger("rabbitq.worker")

ONCE = "rabbitq_once"
"""The attribute of a log record said once per run: the restarts of ``--reload`` do not
repeat it (:class:`rabbitq._ops.logs.FirstProcessOnly`)."""

DEFAULT_CONSUMER_TIMEOUT = 1800.0
"""RabbitMQ's default ``consumer_timeout`` in seconds (30 minutes, since 3.8.17)."""

MARGIN = 0.9
"""A handler's timeout should stay under this fraction of ``consumer_timeout``: the ack
itself, a retry or DLQ copy and its confirm also take time."""


def timeout_problems(
    handlers: Mapping[str, Handler], consumer_timeout: float | None, held: int = 0
) -> list[str]:
    """One line per handler whose time limit is not safely below ``consumer_timeout``
    (seconds; ``None`` or ``0``: the broker has none, so there is nothing to check), and
    per rate-limited handler whose deliveries could wait past it: with ``held``
    deliveries in the worker (its broker prefetch), the last waits ``held`` intervals."""
    if not consumer_timeout:
        return []
    limit = consumer_timeout * MARGIN
    problems = []
    for name, handler in sorted(handlers.items()):
        if handler.timeout is None:
            problems.append(
                f"handler for {name!r} has no timeout: if it runs past the broker's "
                f"consumer_timeout ({consumer_timeout:g}s) RabbitMQ closes the channel and "
                f"redelivers the message"
            )
        elif handler.timeout > limit:
            problems.append(
                f"handler for {name!r} may run {handler.timeout:g}s, too close to or past the "
                f"broker's consumer_timeout ({consumer_timeout:g}s): keep it under "
                f"{limit:g}s, or raise consumer_timeout on the broker"
            )
        rate = handler.limit.rate if handler.limit is not None else None
        if rate is not None and held * rate.interval + (handler.timeout or 0) > limit:
            problems.append(
                f"handler for {name!r} is limited to {rate}: {held} held deliveries may wait "
                f"{held * rate.interval:g}s for their turn, past the broker's consumer_timeout "
                f"({consumer_timeout:g}s): lower limit_waiting or prefetch, or give it a queue "
                f"of its own"
            )
    return problems


def check_timeouts(
    handlers: Mapping[str, Handler], consumer_timeout: float | None, held: int = 0
) -> list[str]:
    """Log the ``consumer_timeout`` in use and a warning per problem; return the problems."""
    if consumer_timeout is None:
        consumer_timeout = DEFAULT_CONSUMER_TIMEOUT
        source = "RabbitMQ's default; set RABBITQ_CONSUMER_TIMEOUT if your broker differs"
    else:
        source = "as configured"
    if consumer_timeout:
        log.info(
            "broker consumer_timeout taken to be %gs (%s)",
            consumer_timeout,
            source,
            extra={ONCE: True},
        )
    problems = timeout_problems(handlers, consumer_timeout, held)
    for problem in problems:
        log.warning("%s", problem)
    return problems


def on_channel_closed(_sender: object, exc: BaseException | None) -> None:
    """Say plainly why the broker closed the consume channel, if it was the ack timeout."""
    text = str(exc or "")
    if "acknowledgement" in text and "timed out" in text:
        log.warning(
            "RabbitMQ closed the consume channel: a delivery was not acknowledged within its "
            "consumer_timeout (%s). Unacked messages go back to the queue and are redelivered; "
            "keep handler timeouts below consumer_timeout",
            text,
        )
    elif text:
        log.warning("the broker closed the consume channel (%s); reopening it", text)
