"""An app's topology (pure): :func:`plan_app`, and that of one partition of a
partitioned app (see :mod:`rabbitq._amqp.partitions` for the whole picture)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigurationError
from .lanes import base_queue, with_lanes
from .partitions import Partitioning, hash_exchange, partition_queue
from .topology import DEFAULT_DELIVERY_LIMIT, QueueType, Topology, dlq_name, plan


def plan_app(app: Any) -> Topology:
    """Every queue, argument and binding ``app`` (a :class:`rabbitq.App`) declares:
    one retry queue per delay that some handler uses (an ordered handler's retries wait
    in the worker, so a partitioned app has none for them); with ``priorities=N``, the
    lanes beside the main queue (amqp.lanes)."""
    handlers = app.handlers
    blocked = any(h.on_dead == "block" for h in handlers.values())  # the registry
    if app.partitions:  # partition 0's queues and all the rest
        return plan_partition(
            queue=app.partition_base, exchange=app.exchange,
            delays_ms={ms for h in handlers.values() if not h.ordered_by
                       for ms in h.retry.delays_ms},
            routing_keys=handlers, count=app.partitions, index=app.partition_index,
            queue_type=app.queue_type, delivery_limit=app.delivery_limit, blocked=blocked,
        )  # fmt: skip
    priorities = getattr(app, "priorities", 0)
    if priorities > 1 and (ordered := [n for n, h in handlers.items() if h.ordered_by]):
        raise ConfigurationError(
            f"priorities cannot be combined with ordered_by ({', '.join(sorted(ordered))}): "
            "a key's messages in two lanes would run out of order"
        )
    return with_lanes(plan(
        queue=base_queue(app), exchange=app.exchange,
        delays_ms={ms for h in handlers.values() for ms in h.retry.delays_ms},
        blocked=blocked, routing_keys=handlers, queue_type=app.queue_type,
        delivery_limit=app.delivery_limit,
    ), priorities)  # fmt: skip


def plan_partition(
    *,
    queue: str,
    exchange: str,
    delays_ms: Iterable[int],
    routing_keys: Iterable[str],
    count: int,
    index: int = 0,
    queue_type: QueueType = "classic",
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT,
    blocked: bool = False,
) -> Topology:
    """The topology of partition ``index`` of ``count`` (pure): its queue with
    single-active-consumer, its retry queues, its registry of blocked keys (``blocked``:
    one per partition, read by its one active worker), the app's one DLQ, and (in
    ``partitioning``) everything every partition shares, so that any one worker
    declares the whole app."""
    if not 0 <= index < count:
        raise ConfigurationError(f"partition {index} of {count} does not exist")
    delays = sorted(set(delays_ms))
    dlq = dlq_name(queue)
    parts = [
        _one(queue, i, delays, exchange, dlq, queue_type, delivery_limit, blocked)
        for i in range(count)
    ]
    partitioning = Partitioning(
        exchange=hash_exchange(queue),
        source=exchange,
        routing_keys=tuple(sorted(set(routing_keys))),
        queues=tuple(
            q for p in parts for q in (p.main, *p.retries, *([p.blocked] if p.blocked else []))
        ),
        mains=tuple(p.main.name for p in parts),
    )
    return dataclasses.replace(parts[index], partitioning=partitioning)


def _one(
    queue: str,
    index: int,
    delays: list[int],
    exchange: str,
    dlq: str,
    queue_type: QueueType,
    delivery_limit: int,
    blocked: bool,
) -> Topology:
    base = plan(
        queue=partition_queue(queue, index),
        exchange=exchange,
        delays_ms=delays,
        routing_keys=(),
        queue_type=queue_type,
        delivery_limit=delivery_limit,
        blocked=blocked,
    )
    main_arguments = {
        **base.main.arguments,
        "x-dead-letter-routing-key": dlq,
        "x-single-active-consumer": True,
    }
    return dataclasses.replace(
        base,
        main=dataclasses.replace(base.main, arguments=main_arguments),
        dlq=dataclasses.replace(base.dlq, name=dlq),
    )
