"""Partitions: an app's messages spread over N queues by key (pure names, and their
declare; :mod:`rabbitq._amqp.partition_plan` plans one partition's queues).

For ``App(queue="ledger", exchange="rabbitq", partitions=4)``::

    exchange  rabbitq              topic (the app's), bound with each type name to:
    exchange  ledger.partitions    x-consistent-hash, hash-header rabbitq-key
    queue     ledger.p0 .. p3      x-single-active-consumer, bound with weight "1";
                                   DLX "" -> ledger.dlq (shared)
    queue     ledger.p0.retry.1s   per partition: TTL, DLX "" -> ledger.p0
    queue     ledger.p0.blocked    per partition, with on_dead="block": blocked keys
    queue     ledger.dlq           one for the app

The publisher writes the message's key (its handler's ``ordered_by``, else its
``message_id``) into the ``rabbitq-key`` header, and the consistent-hash exchange
(RabbitMQ's ``rabbitmq_consistent_hash_exchange`` plugin, shipped, not enabled by
default) routes equal keys to one partition queue. With single-active-consumer, one
consumer of each partition queue gets its messages at a time; the others wait to take
over. See docs/ordering.md.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection

from ..errors import ConfigurationError
from ..ladder.plan import DELIVER_EXCHANGE, destination_arguments

KEY_HEADER = "rabbitq-key"
"""The header the consistent-hash exchange hashes on (``hash-header``)."""
EXCHANGE_TYPE = "x-consistent-hash"
PLUGIN = "rabbitmq_consistent_hash_exchange"
ENABLE = f"rabbitmq-plugins enable {PLUGIN}"
MAX_PARTITIONS = 256
NOT_ENABLED = (
    f"the broker has no {EXCHANGE_TYPE} exchange, which App(partitions=N) needs: enable "
    f"the plugin that ships with RabbitMQ ({ENABLE}; no restart needed)"
)


def check_partitions(count: int) -> int:
    """``App(partitions=...)``: 0 (none) or 1 to :data:`MAX_PARTITIONS`."""
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_PARTITIONS:
        raise ConfigurationError(f"partitions must be 0 to {MAX_PARTITIONS}, not {count!r}")
    return count


def partition_queue(queue: str, index: int) -> str:
    """``<queue>.p<index>``: the queue of one partition."""
    return f"{queue}.p{index}"


def hash_exchange(queue: str) -> str:
    """``<queue>.partitions``: the consistent-hash exchange in front of the partitions."""
    return f"{queue}.partitions"


def key_header(key: object, message_id: str) -> dict[str, str]:
    """The ``rabbitq-key`` header of a published message: its ``ordered_by`` key, or
    (no ordering) its id, which spreads unordered messages over every partition."""
    return {KEY_HEADER: message_id if key is None else str(key)}


class Spec(Protocol):
    """A queue to declare (:class:`rabbitq._amqp.topology.QueueSpec` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def arguments(self) -> Mapping[str, Any]: ...


def stamp(app: Any, message: Any, headers: Any, message_id: str | None, delayed: bool) -> None:
    """Write ``message``'s ``rabbitq-key`` into ``headers`` as the publisher sends it,
    where ``app`` (a :class:`rabbitq.App`) orders or partitions it. A delayed message
    of a partitioned app is refused: the ladder delivers to one named queue."""
    partitioned = getattr(app, "partitions", 0)
    if delayed and partitioned:
        raise ConfigurationError(
            "delay= and at= are not supported with App(partitions=N) yet: the delay ladder "
            "delivers to one queue, not through the consistent-hash exchange"
        )
    key = order_key(app, message)
    if key is not None or partitioned:
        headers.update(key_header(key, message_id or ""))


def order_key(app: Any, message: Any) -> object:
    """``message``'s key under its handler's ``ordered_by`` in ``app`` (None: not
    ordered)."""
    handler = app.handlers.get(message.type_name())
    ordered_by = handler.ordered_by if handler is not None else None
    return None if ordered_by is None else ordered_by(message)


@dataclass(frozen=True, kw_only=True)
class Partitioning:
    """What a partitioned app declares besides one partition's own queues."""

    exchange: str
    """The consistent-hash exchange."""
    source: str
    """The app's exchange, bound to :attr:`exchange` with each routing key."""
    routing_keys: tuple[str, ...]
    queues: tuple[Spec, ...]
    """Every partition's queue, retry queues included, partition 0 first."""
    mains: tuple[str, ...]
    """The partition queues' names, in order."""

    @property
    def hash_arguments(self) -> dict[str, Any]:
        """The consistent-hash exchange's arguments."""
        return {"hash-header": KEY_HEADER}


async def declare(channel: AbstractChannel, partitioning: Partitioning) -> None:
    """Declare the consistent-hash exchange, every partition queue and the bindings.
    A broker without the plugin: :class:`ConfigurationError` with :data:`NOT_ENABLED`
    (the broker closes the connection on an unknown exchange type)."""
    try:
        hashed = await channel.declare_exchange(
            partitioning.exchange,
            EXCHANGE_TYPE,
            durable=True,
            arguments=partitioning.hash_arguments,
        )
    except aiormq.exceptions.AMQPError as exc:
        if "unknown exchange type" in str(exc) or "invalid exchange type" in str(exc):
            raise ConfigurationError(NOT_ENABLED) from exc
        raise
    source = await channel.get_exchange(partitioning.source, ensure=False)
    for key in partitioning.routing_keys:
        await hashed.bind(source, routing_key=key)
    for spec in partitioning.queues:
        declared = await channel.declare_queue(
            spec.name, durable=True, arguments=dict(spec.arguments)
        )
        if spec.kind == "main":
            await declared.bind(hashed, routing_key="1")  # the weight: one share each
            await declared.bind(DELIVER_EXCHANGE, arguments=destination_arguments(spec.name))


async def probe(connection: AbstractConnection) -> str | None:
    """:data:`NOT_ENABLED` if the broker has no consistent-hash
    exchange type, else None. ``connection`` is used up when it is missing."""
    channel = await connection.channel(publisher_confirms=False)
    name = f"rabbitq.doctor.{uuid.uuid4().hex[:12]}"
    try:
        exchange = await channel.declare_exchange(name, EXCHANGE_TYPE, auto_delete=True)
    except aiormq.exceptions.AMQPError as exc:
        if "exchange type" in str(exc):
            return NOT_ENABLED
        raise
    await exchange.delete()
    with contextlib.suppress(Exception):
        await channel.close()
    return None


def exchange_types_problem(types: Iterable[str]) -> str | None:
    """``rabbitq doctor``'s finding on the broker's exchange types (the management API's
    ``/api/overview``): :data:`NOT_ENABLED` when the consistent-hash one is missing."""
    return None if EXCHANGE_TYPE in set(types) else NOT_ENABLED
