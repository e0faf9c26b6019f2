"""Queue names and arguments (pure), and the one function that declares them.

For ``App(queue="emails", exchange="rabbitq")`` with delays of 1 s and 10 s::

    exchange  rabbitq            topic, durable
    queue     emails             DLX "" -> emails.dlq, bound with each type name
    queue     emails.retry.1s    TTL 1000 ms, DLX "" -> emails
    queue     emails.retry.10s   TTL 10000 ms, DLX "" -> emails
    queue     emails.dlq         overflow reject-publish (quorum: delivery limit 10^9)
    queue     emails.blocked     only with on_dead="block": the blocked keys (as the DLQ)
    binding   rabbitq.delay.deliver -> emails   headers rabbitq-delay-to = emails
    ladder    rabbitq.delay.<type>.00 .. 24      shared by every app (rabbitq.ladder)

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

from ..errors import ConfigurationError, TopologyMismatch
from ..ladder import declare as ladder_declare
from ..ladder.plan import DELIVER_EXCHANGE, Ladder, destination_arguments, is_ladder_queue, ladder
from ..outcome import delay_label as delay_label  # re-exported: names use it
from ..retry import delay_ms as delay_ms
from . import partitions

QueueType = Literal["classic", "quorum"]
QUEUE_TYPES: tuple[QueueType, ...] = ("classic", "quorum")
DEFAULT_DELIVERY_LIMIT = 10
# An App's queues are quorum queues unless it says otherwise: see docs/reliability.md.
DEFAULT_QUEUE_TYPE: QueueType = "quorum"


def retry_queue_name(queue: str, ms: int) -> str:
    """``<queue>.retry.<label>``: the queue that holds retries of this delay."""
    return f"{queue}.retry.{delay_label(ms)}"


DLQ_SUFFIX = ".dlq"


def dlq_name(queue: str) -> str:
    """``<queue>.dlq``: the dead-letter queue of ``queue``."""
    return f"{queue}{DLQ_SUFFIX}"


BLOCKED_SUFFIX = ".blocked"


def blocked_queue_name(queue: str) -> str:
    """``<queue>.blocked``: the keys of ``queue`` blocked by ``on_dead="block"``, one
    message each (:mod:`rabbitq._worker.blocked_keys`, docs/ordering.md)."""
    return f"{queue}{BLOCKED_SUFFIX}"


@dataclass(frozen=True, kw_only=True)
class QueueSpec:
    """A queue to declare: its name and exact arguments (all queues are durable)."""

    name: str
    kind: Literal["main", "retry", "dlq", "blocked"]
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
    ladder: Ladder
    """The delay ladder of the app's queue type, shared by every app on the vhost; the
    main queue is bound to its delivering exchange on its own name."""
    partitioning: partitions.Partitioning | None = None
    """``App(partitions=N)``: the hash exchange and every partition (amqp.partitions)."""
    blocked: QueueSpec | None = None
    """The blocked keys' registry, when a handler has ``on_dead="block"``."""
    lanes: tuple[QueueSpec, ...] = ()
    """``App(priorities=N)``: the queues of lanes 1 to N-1 (amqp.lanes; lane 0 is main)."""
    lane_bindings: tuple[tuple[str, str], ...] = ()
    """``(lane queue, routing key)`` of every lane's binding to ``exchange``."""

    @property
    def queues(self) -> tuple[QueueSpec, ...]:
        """Main queue, lanes, retry queues (shortest delay first), DLQ, blocked keys'
        registry."""
        blocked = [self.blocked] if self.blocked else []
        return (self.main, *self.lanes, *self.retries, self.dlq, *blocked)

    def depth_specs(self) -> list[tuple[str, str]]:
        """``(name, kind)`` of every queue, as :func:`queue_depths` takes them (with
        partitions: every partition's queues too)."""
        specs = [(q.name, q.kind) for q in self.queues]
        others = self.partitioning.queues if self.partitioning is not None else ()
        return specs + [(q.name, q.kind) for q in others if (q.name, q.kind) not in specs]

    def unroutable(self, routing_key: str, app_name: str | None) -> str:
        """What to do about a publish with ``routing_key`` that the broker returned (no
        queue bound): declare this app's queues first when it handles the key, else
        run the app that does (``app_name``: the ``MODULE:APP`` of ``rabbitq topology``)."""
        lanes = {key: name for name, key in self.lane_bindings}
        queue = lanes.get(routing_key, self.main.name)
        if routing_key in self.routing_keys or routing_key in lanes:
            return (
                f"queue {queue!r} is not declared yet: start a worker of this app or run "
                f"'rabbitq topology {app_name or 'MODULE:APP'}' first"
            )
        return (
            f"no handler of this app (queue {self.main.name!r}) takes {routing_key!r}: start "
            "the worker of the app that handles it, or run 'rabbitq topology' for that app"
        )

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


# A DLQ's delivery limit: high enough that no number of reads ever reaches it. RabbitMQ
# 4.0+ gives every quorum queue a limit of 20 unless told otherwise and counts the
# returns of `dlq list`/`show` (4.0-4.2) or their channel closes (4.3) toward it, and a
# DLQ has no dead-letter target, so at the limit a message would be dropped. 0 and -1
# are no answer: on 3.10 they drop a message at its first return (measured).
DLQ_DELIVERY_LIMIT = 1_000_000_000


def dlq_arguments(queue_type: QueueType) -> dict[str, Any]:
    """A DLQ's arguments: a length limit (a policy) can only refuse a dead letter, never
    drop one (``x-overflow: reject-publish``), and on quorum reading it never uses up a
    delivery limit (see :data:`DLQ_DELIVERY_LIMIT`).

    A policy that sets ``overflow: drop-head`` or ``message-ttl`` still wins over these
    arguments: ``rabbitq doctor`` reports such policies.
    """
    arguments: dict[str, Any] = {"x-overflow": "reject-publish"}
    if queue_type == "quorum":
        arguments = {
            "x-queue-type": "quorum",
            "x-delivery-limit": DLQ_DELIVERY_LIMIT,
            **arguments,
        }
    return arguments


def plan(
    *,
    queue: str,
    exchange: str,
    delays_ms: Iterable[int],
    routing_keys: Iterable[str],
    queue_type: QueueType = "classic",
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT,
    blocked: bool = False,
) -> Topology:
    """The names and arguments of every object an app declares. No I/O. ``blocked``:
    some handler has ``on_dead="block"``, and the registry of blocked keys is declared
    (with the DLQ's arguments: nothing drops its messages, re-reads use up no limit)."""
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
    dlq = QueueSpec(name=dlq_name(queue), kind="dlq", arguments=dlq_arguments(queue_type))
    registry = QueueSpec(
        name=blocked_queue_name(queue), kind="blocked", arguments=dlq_arguments(queue_type)
    )
    return Topology(
        blocked=registry if blocked else None,
        exchange=exchange,
        main=main,
        retries=retries,
        dlq=dlq,
        routing_keys=tuple(sorted(set(routing_keys))),
        ladder=ladder(queue_type),
    )


# "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/':
#  received the value '1000' of type 'signedint' but current is none"
_INEQUIVALENT = re.compile(
    r"inequivalent arg '(?P<arg>[^']+)' for (?P<kind>queue|exchange) '(?P<name>[^']*)'"
    r" in vhost '[^']*': (?P<detail>.*)$"
)


# The arguments rabbitq gives quorum queues only: a mismatch on one of them, where one
# side has none, means the queue exists with the other type. Not on a DLQ: every DLQ has
# x-overflow, and DLQs declared before rabbitq set it (issue 11) have neither it nor
# x-delivery-limit, whatever their type; there only x-queue-type tells the type.
_QUORUM_ONLY = frozenset(_type_arguments("quorum", DEFAULT_DELIVERY_LIMIT))


def type_change(argument: str, detail: str, *, dlq: bool = False) -> tuple[str, str] | None:
    """``(existing, wanted)`` queue types if a mismatch on ``argument`` means that the
    queue exists with another type than the app wants; else None. ``detail`` is the
    broker's "received ... but current is ..." text; ``dlq``: the queue is a DLQ."""
    if argument not in _QUORUM_ONLY or (dlq and argument != "x-queue-type"):
        return None
    received, _, current = detail.partition(" but current is ")
    if argument == "x-queue-type":
        types = [re.search(r"'?(classic|quorum|stream)'?", side) for side in (current, received)]
        existing, wanted = (m[1] if m else "classic" for m in types)
        return (existing, wanted) if existing != wanted else None
    if current.strip() == "none":
        return ("classic", "quorum")
    if received.strip() == "received none":
        return ("quorum", "classic")
    return None


def old_dlq(name: str, argument: str, detail: str) -> str:
    """What to do about a DLQ declared without an argument rabbitq now gives DLQs
    (``x-overflow``, on quorum ``x-delivery-limit``); "" if that is not the mismatch."""
    received, _, current = detail.partition(" but current is ")
    value = re.search(r"'([^']*)'", received)
    if argument not in dlq_arguments("quorum") or current.strip() != "none" or value is None:
        return ""
    main = name.removesuffix(DLQ_SUFFIX)
    return (
        f"queue {name!r} was declared without {argument} (the app declares {argument} "
        f"{value[1]}: a DLQ declared before rabbitq set it); RabbitMQ cannot change a "
        f"queue's arguments: move the dead letters over once (docs/reliability.md, "
        f"'Migrating a deployed DLQ'): rabbitq dlq export {main} FILE, rabbitmqctl "
        f"delete_queue {name}, rabbitq topology MODULE:APP, rabbitq dlq import {main} FILE"
    )


def mismatch_from_error(
    exc: BaseException, topology: Topology | None = None
) -> TopologyMismatch | None:
    """Turn the broker's PRECONDITION_FAILED text into a :class:`TopologyMismatch`.

    A queue that exists with the other queue type is said as such, rather than by the
    first quorum argument the broker happened to compare; a DLQ declared before rabbitq
    gave DLQs their arguments, with the way to migrate it. Which queue is the DLQ comes
    from ``topology`` (without it: a name that ends in ``.dlq``).
    """
    text = " ".join(str(a) for a in exc.args)
    match = _INEQUIVALENT.search(text)
    if match is None:
        return None
    explanation = ""
    name, argument, detail = match["name"], match["arg"], match["detail"]
    dlq = name == topology.dlq.name if topology is not None else name.endswith(DLQ_SUFFIX)
    if match["kind"] == "queue" and (change := type_change(argument, detail, dlq=dlq)):
        existing, wanted = change
        explanation = (
            f"queue {name!r} exists as a {existing} queue, the app wants {wanted} "
            f"(queue_type={wanted!r}); RabbitMQ cannot change a queue's type: drain and "
            f"delete it (rabbitmqctl delete_queue {name}) or set App(queue_type={existing!r})"
        )
    elif match["kind"] == "queue" and dlq:
        explanation = old_dlq(name, argument, detail)
    elif is_ladder_queue(name):
        explanation = (
            f"{match['kind']} {name!r} belongs to the delay ladder that every app on this "
            f"vhost shares (docs/delays.md), and exists with other arguments than rabbitq "
            f"gives it: once it is empty, delete it (rabbitmqctl delete_queue {name}) and "
            f"the next worker or 'rabbitq topology MODULE:APP' declares it again"
        )
    return TopologyMismatch(
        match["kind"], name, argument, detail.replace("'", ""), explanation=explanation
    )


async def declare(channel: AbstractChannel, topology: Topology) -> AbstractQueue:
    """Declare the exchange, every queue and the bindings, then the delay ladder and the
    main queue's binding to it; return the main queue.

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
        for name, key in topology.lane_bindings:
            await declared[name].bind(exchange, routing_key=key)
        await ladder_declare.declare(channel, topology.ladder)
        for queue in (main, *(declared[lane.name] for lane in topology.lanes)):
            await queue.bind(DELIVER_EXCHANGE, arguments=destination_arguments(queue.name))
        if topology.partitioning is not None:
            await partitions.declare(channel, topology.partitioning)
    except aiormq.exceptions.ChannelPreconditionFailed as exc:
        mismatch = mismatch_from_error(exc, topology)
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
