"""What ``rabbitq doctor`` decides from (:class:`Facts`, :class:`QueueState`) and what it
says (:class:`Finding`): plain data, gathered by ``rabbitq._ops.doctor_probe`` and read by
``rabbitq._ops.doctor``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._amqp.brokers import BrokerFacts
from .._amqp.topology import Topology
from ..handler import Handler
from ..ladder.probe import CatchAll

Level = Literal["info", "warning", "danger"]
LEVELS: tuple[Level, ...] = ("info", "warning", "danger")


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One thing doctor has to say."""

    level: Level
    topic: str
    message: str
    fix: str | None = None


@dataclass(frozen=True, kw_only=True)
class QueueState:
    """What the broker says about one of the app's queues."""

    name: str
    exists: bool
    messages: int | None = None
    arguments: Mapping[str, Any] | None = None
    """As declared on the broker (management API); None: not known."""
    stuck: int = 0
    """Messages the queue counts but neither offers nor has out (``messages`` minus
    ready and unacked): dead letters of a quorum queue not yet handed on."""
    mismatch: str | None = None
    """The broker's PRECONDITION_FAILED text for a redeclare with the app's arguments."""
    policy: str | None = None
    operator_policy: str | None = None
    effective_policy: Mapping[str, Any] = field(default_factory=dict)
    """The definition the broker applies (policy and operator policy merged)."""


@dataclass(frozen=True, kw_only=True)
class StoreFacts:
    """What one Redis of the app's stores says of its persistence."""

    where: str
    """Its URL, without a password."""
    appendonly: str | None = None
    save: str | None = None
    """``CONFIG GET appendonly`` and ``save``; None each: refused."""
    error: str | None = None
    """Why it could not be asked (None: it answered)."""


@dataclass(frozen=True, kw_only=True)
class Facts:
    """Everything doctor decides from. ``None`` means "could not be found out"."""

    broker: BrokerFacts
    topology: Topology
    handlers: Mapping[str, Handler]
    queues: Mapping[str, QueueState]
    consumer_timeout: float | None
    """As configured (``RABBITQ_CONSUMER_TIMEOUT``); None: RabbitMQ's default assumed."""
    management_url: str | None = None
    management_error: str | None = None
    """Why the management API could not be used (None: it was, or it was not tried)."""
    other_queues: Mapping[str, int] | None = None
    """Every queue on the vhost with its depth (management API); without the API, the
    app's retry queues of common delays found over AMQP; None: not known."""
    other_arguments: Mapping[str, Mapping[str, Any]] | None = None
    """The arguments of each queue in ``other_queues`` (management API); None: not known."""
    alarms: Sequence[str] | None = None
    partitions_problem: str | None = None
    delay_catch_all: CatchAll | None = None
    """The delay ladder's catch-all for undeliverable delayed messages; None: not known."""
    delay_alternate_policy: bool = False
    """A policy gives ``rabbitq.delay.deliver`` an ``alternate-exchange`` (management API)."""
    vhost: str = "/"
    stores: Sequence[StoreFacts] = ()
    """The Redis servers the app keeps stores in (none: no Redis store)."""
    """``App(partitions=N)`` on a broker without the consistent-hash exchange: why."""
    """Active resource alarms, e.g. ``"memory alarm on rabbit@a"``; None: not known."""
