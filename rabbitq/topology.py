"""Queue names and arguments (pure), and the one function that declares them.

For ``App(queue="emails", exchange="rabbitq")`` with delays of 1 s and 10 s::

    exchange  rabbitq            topic, durable
    queue     emails             DLX "" -> emails.dlq, bound with each type name
    queue     emails.retry.1s    TTL 1000 ms, DLX "" -> emails
    queue     emails.retry.10s   TTL 10000 ms, DLX "" -> emails
    queue     emails.dlq

Queue arguments are a wire contract: RabbitMQ refuses to redeclare a queue with
other arguments, so any change here is a breaking change for deployed queues.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractQueue

from .errors import ConfigurationError, TopologyMismatch

QueueType = Literal["classic", "quorum"]
QUEUE_TYPES: tuple[QueueType, ...] = ("classic", "quorum")
DEFAULT_DELIVERY_LIMIT = 10
# An App's queues are quorum queues unless it says otherwise: see docs/reliability.md.
DEFAULT_QUEUE_TYPE: QueueType = "quorum"

_UNITS = (("h", 3_600_000), ("m", 60_000), ("s", 1_000))


def delay_ms(seconds: float) -> int:
    """A delay in seconds as whole milliseconds (at least 1 ms)."""
    try:
        ms = 0 if isinstance(seconds, bool) else round(seconds * 1000)
    except (TypeError, ValueError, OverflowError):  # a string, None, NaN, infinity
        ms = 0
    if ms < 1 or abs(ms - seconds * 1000) > 1e-6:
        raise ConfigurationError(
            f"retry delay {seconds!r} s must be a positive whole number of milliseconds"
        )
    return ms


def delay_label(ms: int) -> str:
    """The delay written exactly in the largest unit that divides it: 1s, 90s, 2m, 1500ms."""
    for unit, size in _UNITS:
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def retry_queue_name(queue: str, ms: int) -> str:
    """``<queue>.retry.<label>``: the queue that holds retries of this delay."""
    return f"{queue}.retry.{delay_label(ms)}"


def dlq_name(queue: str) -> str:
    """``<queue>.dlq``: the dead-letter queue of ``queue``."""
    return f"{queue}.dlq"


@dataclass(frozen=True, kw_only=True)
class QueueSpec:
    """A queue to declare: its name and exact arguments (all queues are durable)."""

    name: str
    kind: Literal["main", "retry", "dlq"]
    arguments: Mapping[str, Any] = field(default_factory=dict)
    ttl_ms: int | None = None


@dataclass(frozen=True, kw_only=True)
class Topology:
    """Everything one app declares. Build it with :func:`plan`."""

    exchange: str
    main: QueueSpec
    retries: tuple[QueueSpec, ...]
    dlq: QueueSpec
    routing_keys: tuple[str, ...]

    @property
    def queues(self) -> tuple[QueueSpec, ...]:
        """Main queue, retry queues (shortest delay first), DLQ."""
        return (self.main, *self.retries, self.dlq)

    def retry_queue(self, ms: int) -> QueueSpec:
        """The retry queue for a delay of ``ms`` milliseconds."""
        for spec in self.retries:
            if spec.ttl_ms == ms:
                return spec
        raise ConfigurationError(
            f"no retry queue for a delay of {delay_label(ms)} on {self.main.name!r}; "
            f"available: {', '.join(delay_label(s.ttl_ms or 0) for s in self.retries) or 'none'}"
        )


def _type_arguments(queue_type: QueueType, delivery_limit: int) -> dict[str, Any]:
    if queue_type == "classic":
        return {}
    return {
        "x-queue-type": "quorum",
        "x-delivery-limit": delivery_limit,
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
    }


def plan(
    *,
    queue: str,
    exchange: str,
    delays_ms: Iterable[int],
    routing_keys: Iterable[str],
    queue_type: QueueType = "classic",
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT,
) -> Topology:
    """The names and arguments of every object an app declares. No I/O."""
    if queue_type not in QUEUE_TYPES:
        raise ConfigurationError(f"queue_type must be 'classic' or 'quorum', not {queue_type!r}")
    if not queue or queue.startswith("amq."):
        raise ConfigurationError(f"invalid queue name {queue!r}")
    if delivery_limit < 1:
        raise ConfigurationError(f"delivery_limit must be at least 1, not {delivery_limit}")
    extra = _type_arguments(queue_type, delivery_limit)
    main = QueueSpec(
        name=queue,
        kind="main",
        arguments={
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": dlq_name(queue),
            **extra,
        },
    )
    retries = tuple(
        QueueSpec(
            name=retry_queue_name(queue, ms),
            kind="retry",
            ttl_ms=ms,
            arguments={
                "x-message-ttl": ms,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": queue,
                **extra,
            },
        )
        for ms in sorted(set(delays_ms))
    )
    dlq_args: dict[str, Any] = {"x-queue-type": "quorum"} if queue_type == "quorum" else {}
    dlq = QueueSpec(name=dlq_name(queue), kind="dlq", arguments=dlq_args)
    return Topology(
        exchange=exchange,
        main=main,
        retries=retries,
        dlq=dlq,
        routing_keys=tuple(sorted(set(routing_keys))),
    )


# "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/':
#  received the value '1000' of type 'signedint' but current is none"
_INEQUIVALENT = re.compile(
    r"inequivalent arg '(?P<arg>[^']+)' for (?P<kind>queue|exchange) '(?P<name>[^']*)'"
    r" in vhost '[^']*': (?P<detail>.*)$"
)


def mismatch_from_error(exc: BaseException) -> TopologyMismatch | None:
    """Turn the broker's PRECONDITION_FAILED text into a :class:`TopologyMismatch`."""
    text = " ".join(str(a) for a in exc.args)
    match = _INEQUIVALENT.search(text)
    if match is None:
        return None
    return TopologyMismatch(
        match["kind"], match["name"], match["arg"], match["detail"].replace("'", "")
    )


async def declare(channel: AbstractChannel, topology: Topology) -> AbstractQueue:
    """Declare the exchange, every queue and the bindings; return the main queue.

    Idempotent. Declaring on a robust channel makes aio-pika re-declare all of it
    after a reconnect.
    """
    try:
        exchange = await channel.declare_exchange(
            topology.exchange, aio_pika.ExchangeType.TOPIC, durable=True
        )
        declared: dict[str, AbstractQueue] = {}
        for spec in topology.queues:
            declared[spec.name] = await channel.declare_queue(
                spec.name, durable=True, arguments=dict(spec.arguments)
            )
        main = declared[topology.main.name]
        for key in topology.routing_keys:
            await main.bind(exchange, routing_key=key)
    except aiormq.exceptions.ChannelPreconditionFailed as exc:
        mismatch = mismatch_from_error(exc)
        if mismatch is None:
            raise
        raise mismatch from exc
    return main


@dataclass(frozen=True, kw_only=True)
class QueueDepth:
    """What a passive declare tells about a queue; ``exists`` is False if it does not."""

    name: str
    kind: str
    exists: bool
    messages: int = 0
    consumers: int = 0


async def queue_depths(
    connection: AbstractConnection, specs: Iterable[tuple[str, str]]
) -> list[QueueDepth]:
    """Passively declare each ``(name, kind)`` and report its depth and consumers.

    A missing queue closes the channel it was asked on, so a new channel is opened
    after each miss.
    """
    depths: list[QueueDepth] = []
    channel = await connection.channel(publisher_confirms=False)
    try:
        for name, kind in specs:
            try:
                result = await channel.declare_queue(name, passive=True)
            except aiormq.exceptions.ChannelNotFoundEntity:
                depths.append(QueueDepth(name=name, kind=kind, exists=False))
                channel = await connection.channel(publisher_confirms=False)
                continue
            ok = result.declaration_result
            depths.append(
                QueueDepth(
                    name=name,
                    kind=kind,
                    exists=True,
                    messages=ok.message_count or 0,
                    consumers=ok.consumer_count or 0,
                )
            )
    finally:
        if not channel.is_closed:
            await channel.close()
    return depths
