"""Priority lanes (pure): ``App(priorities=N)`` has one queue per level, and a publish
with ``priority=k`` goes into lane ``k``.

Neither queue type orders by priority on every RabbitMQ version rabbitq supports
(quorum queues have none before 4.0, two levels on 4.0-4.2, and refuse
``x-max-priority`` before 4.3: :mod:`rabbitq._amqp.brokers`), so rabbitq keeps each
level in a queue of its own and the worker chooses between them
(:mod:`rabbitq._worker.lanes`)::

    queue     emails              lane 0: bound with each type name (foreign producers too)
    queue     emails.prio.1       lane 1: bound with "<type>.prio.1", same arguments
    queue     emails.prio.2       lane 2: bound with "<type>.prio.2"

Every lane has the main queue's arguments (its DLX is the app's one DLQ) and is bound
to the delay ladder's delivering exchange on its own name, so that a delayed publish
and a retry reach the lane they came from. The level also travels in the
``rabbitq-priority`` header (informational: the lane is what decides).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigurationError
from .outgoing import Outgoing, PublishStep, SendNext, add_step
from .topology import QueueSpec, Topology

PRIORITY = "rabbitq-priority"
"""The header that carries a message's priority level (absent: 0)."""
MAX_PRIORITIES = 10
LANE_INFIX = ".prio."
WHOLE: int | None = None
"""``App.lane`` of the app itself; one lane's view (worker.laned) has its level."""


def check_priorities(priorities: int, *, partitions: int = 0) -> int:
    """``App(priorities=N)``: 0 or 1 (none: one queue, as without) to
    :data:`MAX_PRIORITIES`; not with partitions (a key's order across lanes)."""
    if (
        isinstance(priorities, bool)
        or not isinstance(priorities, int)
        or not 0 <= priorities <= MAX_PRIORITIES
    ):
        raise ConfigurationError(
            f"priorities must be 0 to {MAX_PRIORITIES}, not {priorities!r}"
        )
    if priorities > 1 and partitions:
        raise ConfigurationError(
            "priorities cannot be combined with partitions: a key's messages would be "
            "split over lanes and run out of order"
        )
    return priorities


def check_priority(priority: int, priorities: int) -> int:
    """A publish's ``priority=``: 0 to ``priorities - 1`` (0 is the default and the
    lowest; an app without priorities takes only 0)."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ConfigurationError(f"priority must be an int, not {priority!r}")
    if priority == 0:
        return 0
    if priorities < 2:
        raise ConfigurationError(
            f"priority={priority} needs an app with priorities: App(priorities=N)"
        )
    if not 0 <= priority < priorities:
        raise ConfigurationError(
            f"priority must be 0 to {priorities - 1} (App(priorities={priorities})), "
            f"not {priority}"
        )
    return priority


def lane_queue(queue: str, level: int) -> str:
    """The queue of lane ``level``: ``queue`` itself for 0, ``<queue>.prio.<level>``."""
    return queue if level == 0 else f"{queue}{LANE_INFIX}{level}"


def lane_key(type_name: str, level: int) -> str:
    """The routing key a publish of ``level`` goes with: the type name for 0 (what any
    producer sends), ``<type>.prio.<level>`` above."""
    return type_name if level == 0 else f"{type_name}{LANE_INFIX}{level}"


def base_queue(app: Any) -> str:
    """The app's own queue name (lane 0) for the app or one lane's view of it."""
    lane = getattr(app, "lane", None)
    queue: str = app.queue
    return queue.removesuffix(f"{LANE_INFIX}{lane}") if lane else queue


def weight(level: int) -> int:
    """How many deliveries lane ``level`` starts for one of lane 0 while both wait:
    each level twice the one below it."""
    return 1 << level


def share(level: int, busy: Iterable[int]) -> float:
    """The share of the handler slots lane ``level`` gets while the ``busy`` lanes (it
    among them) all have deliveries waiting."""
    levels = set(busy) | {level}
    return weight(level) / sum(weight(b) for b in levels)


def with_lanes(topology: Topology, priorities: int) -> Topology:
    """``topology`` with lanes 1 to ``priorities - 1`` beside its main queue (lane 0):
    the same arguments, their own names (no I/O)."""
    if priorities < 2:
        return topology
    main, levels = topology.main, range(1, priorities)
    lanes = tuple(dataclasses.replace(main, name=lane_queue(main.name, n)) for n in levels)
    keys = topology.routing_keys
    bindings = tuple((lane_queue(main.name, n), lane_key(k, n)) for n in levels for k in keys)
    return dataclasses.replace(topology, lanes=lanes, lane_bindings=bindings)


def lane_of(queue: str, topology: Topology) -> int:
    """The level of ``queue`` in ``topology`` (0: the main queue, or not a lane)."""
    for level, spec in enumerate(topology.lanes, start=1):
        if spec.name == queue:
            return level
    return 0


class PriorityStep:
    """The publish step of ``App(priorities=N)``: a publish with ``priority=k`` (in
    ``out.options``) goes to lane ``k``, its routing key ``<type>.prio.<k>``, its
    delayed copy due into ``<queue>.prio.<k>``, with the ``rabbitq-priority`` header."""

    name = "priority"

    def __init__(self, queue: str, priorities: int) -> None:
        self.queue = queue
        self.priorities = priorities

    async def __call__(self, out: Outgoing, call_next: SendNext) -> str:
        level = check_priority(out.options.get("priority", 0), self.priorities)
        if level:
            out.routing_key = lane_key(out.routing_key, level)
            out.queue = lane_queue(self.queue, level)
            out.headers[PRIORITY] = level
        return await call_next(out)


def with_priority_step(
    steps: tuple[PublishStep, ...], queue: str, priorities: int
) -> tuple[PublishStep, ...]:
    """An app's publish steps with :class:`PriorityStep` in its place, if it has
    priorities (2 levels or more); else unchanged."""
    return steps if priorities < 2 else add_step(steps, PriorityStep(queue, priorities))


def lane_spec(topology: Topology, level: int) -> QueueSpec:
    """The queue of lane ``level`` (0: the main queue)."""
    return topology.main if level == 0 else topology.lanes[level - 1]
