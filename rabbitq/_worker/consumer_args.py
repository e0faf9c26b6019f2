"""The arguments of the worker's ``basic.consume`` (pure).

RabbitMQ 3.12 and later let one consumer ask for its own delivery-acknowledgement
timeout with the ``x-consumer-timeout`` consumer argument (milliseconds); on 4.3 that
timeout is enforced on quorum queues only, and a consumer that outlives it gets a
``basic.cancel`` while its deliveries go back to the queue without raising their
delivery count (RabbitMQ's 4.3 docs and release notes; see ``rabbitq._amqp.brokers``).

The worker knows how long it may hold a delivery: the slowest handler's timeout, plus
what a rate-limited delivery may wait for its turn. When that is longer than the
broker-wide ``consumer_timeout`` it knows of, it asks for enough time with
``x-consumer-timeout``, so a slow but bounded handler is not cut off and redelivered for
ever. It never asks for *less* than the broker-wide timeout (a per-queue policy an
operator set stays in force), and asks nothing when a handler has no timeout (there is
nothing to size it from). Brokers before 3.12 accept the argument and ignore it
(verified on 3.10.8), so the start-up warnings of ``rabbitq._worker.consumer_timeout`` stand there.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .consumer_timeout import DEFAULT_CONSUMER_TIMEOUT, MARGIN, check_timeouts

if TYPE_CHECKING:
    from .._amqp.brokers import BrokerFacts
    from ..app import App
    from ..handler import Handler
    from .admission import Admission

log = logging.getLogger("rabbitq.worker")

CONSUMER_TIMEOUT_ARGUMENT = "x-consumer-timeout"


def needed_seconds(handlers: Mapping[str, Handler], held: int = 0) -> float | None:
    """How long the worker may hold a delivery, over :data:`MARGIN` (whole seconds,
    rounded up); None if a handler has no timeout."""
    longest = 0.0
    for handler in handlers.values():
        if handler.timeout is None:
            return None
        rate = handler.limit.rate if handler.limit is not None else None
        wait = held * rate.interval if rate is not None else 0.0
        longest = max(longest, handler.timeout + wait)
    return float(math.ceil(longest / MARGIN))


def consumer_arguments(
    handlers: Mapping[str, Handler], *, consumer_timeout: float | None, held: int = 0
) -> dict[str, Any]:
    """``{"x-consumer-timeout": ms}`` when the handlers need longer than the broker-wide
    ``consumer_timeout`` (seconds; 0: the broker has none, None: not known, so nothing is
    asked for); else ``{}``."""
    if not consumer_timeout:
        return {}
    needed = needed_seconds(handlers, held)
    if needed is None or needed <= consumer_timeout:
        return {}
    return {CONSUMER_TIMEOUT_ARGUMENT: int(needed * 1000)}


def enforced_timeout(
    *,
    configured: float,
    arguments: Mapping[str, Any],
    queue_type: str,
    timeout_queue_types: tuple[str, ...],
    per_consumer_timeout: bool,
) -> float:
    """The timeout the broker will hold the worker's consumer to (seconds; 0: none):
    the ``x-consumer-timeout`` asked for where the broker honours it, none on a queue
    type the broker does not enforce it on (classic on 4.3), else ``configured``."""
    if queue_type not in timeout_queue_types:
        return 0.0
    asked = arguments.get(CONSUMER_TIMEOUT_ARGUMENT)
    if per_consumer_timeout and isinstance(asked, int):
        return asked / 1000
    return configured


def plan(
    handlers: Mapping[str, Handler],
    *,
    configured: float | None,
    queue_type: str,
    held: int,
    facts: BrokerFacts,
) -> tuple[dict[str, Any], float | None]:
    """The consumer's arguments, and the timeout to check the handlers against
    (``configured`` as it was, None: RabbitMQ's default assumed); logs what was asked."""
    assumed = DEFAULT_CONSUMER_TIMEOUT if configured is None else configured
    arguments = consumer_arguments(handlers, consumer_timeout=assumed, held=held)
    enforced = enforced_timeout(
        configured=assumed,
        arguments=arguments,
        queue_type=queue_type,
        timeout_queue_types=facts.consumer_timeout_queue_types,
        per_consumer_timeout=facts.per_consumer_timeout,
    )
    if arguments:
        log.info(
            "asking RabbitMQ for a consumer timeout of %gs (%s, above consumer_timeout %gs)%s",
            arguments[CONSUMER_TIMEOUT_ARGUMENT] / 1000,
            CONSUMER_TIMEOUT_ARGUMENT,
            assumed,
            "" if facts.per_consumer_timeout else ": this broker ignores it (before 3.12)",
        )
    return arguments, (configured if enforced == assumed else enforced)


class Starting(Protocol):
    """What :func:`at_start` reads of a starting worker."""

    app: App
    consumer_timeout: float | None
    admission: Admission


def at_start(worker: Starting, facts: BrokerFacts) -> dict[str, Any]:
    """At worker start: the consumer's arguments (:func:`plan`), and the check of the
    handlers' timeouts against the timeout the broker will enforce (logged)."""
    held = worker.admission.broker_prefetch
    arguments, timeout = plan(
        worker.app.handlers,
        configured=worker.consumer_timeout,
        queue_type=worker.app.queue_type,
        held=held,
        facts=facts,
    )
    check_timeouts(worker.app.handlers, timeout, held)
    return arguments
