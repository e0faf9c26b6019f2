"""What each RabbitMQ version does that rabbitq depends on (pure: facts, no I/O).

RabbitMQ changed, between 3.10 and 4.4, how a quorum queue counts deliveries toward
``x-delivery-limit``, whether it has a limit at all by default, who owns ``x-``
headers, how it enforces ``consumer_timeout``, and whether a quorum queue can delay a
message itself. Every such fact lives here, keyed by the version the broker announces
in its ``connection.start`` server properties, so that the worker, the DLQ tools and
``rabbitq doctor`` decide from one table.

Each fact says where it comes from (:data:`FACT_ROWS`): verified here on RabbitMQ
3.10.8, or resting on RabbitMQ's documentation and release notes alone. The table in
docs/reliability.md ("Broker versions") is generated from :data:`FACT_ROWS`
(``scripts/reliability.py --broker-facts``), so the facts live in this module only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .fact_rows import PARTITION_ROWS, ROWS_4_4, FactRow

log = logging.getLogger("rabbitq.worker")

Series = Literal["3.x", "4.0-4.2", "4.3+"]

_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?")

NEWEST_KNOWN = (4, 4)
"""The newest series whose behaviour this table describes; later ones are assumed to
behave like it (and ``doctor`` says so)."""


@dataclass(frozen=True, order=True)
class BrokerVersion:
    """A RabbitMQ version, as announced in the server properties (``"3.10.8"``)."""

    major: int
    minor: int
    patch: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @classmethod
    def parse(cls, text: str | bytes | None) -> BrokerVersion | None:
        """``"3.10.8"``, ``"4.1.0-rc.1"``, ``b"4.0.5"`` -> a version; None if unreadable."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        if not isinstance(text, str):
            return None
        match = _VERSION.match(text)
        if match is None:
            return None
        return cls(int(match[1]), int(match[2]), int(match[3] or 0))

    @property
    def series(self) -> Series:
        """The behaviour family: ``3.x`` (3.10-3.13), ``4.0-4.2`` or ``4.3+`` (4.4 decides
        nothing differently for rabbitq: :attr:`BrokerFacts.native_delayed_delivery`)."""
        if self.major < 4:
            return "3.x"
        if (self.major, self.minor) < (4, 3):
            return "4.0-4.2"
        return "4.3+"


BROKER_HEADERS = (
    "x-death",
    "x-first-death-reason",
    "x-first-death-queue",
    "x-first-death-exchange",
    "x-last-death-reason",
    "x-last-death-queue",
    "x-last-death-exchange",
    "x-delivery-count",
    "x-received-from",
)
"""Headers RabbitMQ writes and interprets (dead-lettering, quorum delivery counts,
federation hops). From 3.13 on the broker owns every ``x-`` header and ignores those a
client sets; before, it interpreted a client's ``x-death`` (and crashed a quorum queue
on a malformed one, measured on 3.10.8). Copies that go back into a queue must not
carry them: see :func:`broker_owned`."""


def broker_owned(header: str) -> bool:
    """Whether a header belongs to the broker: every ``x-`` header (case-insensitive),
    the ones in :data:`BROKER_HEADERS` included. rabbitq's own are ``rabbitq-*``."""
    return header.lower().startswith("x-")


def version_from_server_properties(properties: Mapping[str, Any] | None) -> BrokerVersion | None:
    """The version in a connection's server properties (``product`` must be RabbitMQ)."""
    if not properties:
        return None
    product = properties.get("product")
    if isinstance(product, bytes):
        product = product.decode("utf-8", "replace")
    if product is not None and "rabbitmq" not in str(product).lower():
        return None
    return BrokerVersion.parse(properties.get("version"))


@dataclass(frozen=True, kw_only=True)
class BrokerFacts:
    """The version-dependent behaviour of one broker, for quorum queues unless noted."""

    version: BrokerVersion | None
    series: Series
    delivery_count_counts: tuple[str, ...]
    """What a quorum queue counts toward ``x-delivery-limit``."""
    default_delivery_limit: int | None
    """The limit a quorum queue has when neither argument nor policy sets one."""
    limit_below_one_drops: bool
    """Whether ``x-delivery-limit`` 0 or -1 dead-letters (or drops) a message at its
    first return (3.x, measured on 3.10.8) rather than meaning "no limit" (-1 on 4.x)."""
    unlimited_argument: int | None
    """The ``x-delivery-limit`` that means "no limit"; None: there is none, leave the
    argument out (possible only where there is no default limit)."""
    broker_owns_x_headers: bool
    """Whether the broker ignores ``x-`` headers set by clients (3.13+)."""
    consumer_timeout_action: Literal["channel close", "basic.cancel"]
    """What the broker does to a consumer whose delivery outlived ``consumer_timeout``."""
    native_delayed_retry: bool
    """Whether quorum queues can delay a requeued message themselves (4.3+)."""
    consumer_timeout_queue_types: tuple[str, ...] = ("classic", "quorum")
    """The queue types whose consumers ``consumer_timeout`` applies to (4.3: quorum only)."""
    per_consumer_timeout: bool = False
    """Whether the ``x-consumer-timeout`` consumer argument sets a consumer's own timeout
    (3.12+; older brokers accept and ignore it)."""
    global_qos_refused: bool = False
    """Whether ``basic.qos`` with ``global=true`` is a channel error (4.3+)."""
    transient_queues_refused: bool = False
    """Whether declaring a non-durable, non-exclusive queue is refused (4.3+, by default)."""
    queue_mode_refused: bool = False
    """Whether a declare with ``x-queue-mode`` (any value) fails (4.3+: CQv1 removed)."""
    quorum_priorities: str = "none"
    """How a quorum queue orders by message priority."""
    native_delayed_delivery: bool = False
    """Whether a quorum queue holds a message until the time in its
    ``x-opt-delivery-time`` annotation, an AMQP 1.0 feature (4.4+, from RabbitMQ's
    documentation). rabbitq does not use it: it publishes over AMQP 0-9-1, and its
    delays (the ladder) and retries (TTL queues) are the same on every version."""
    measured: bool
    """Whether this series was measured on this project's machine (3.10.8), rather
    than taken from RabbitMQ's documentation."""

    @property
    def nack_counts(self) -> bool:
        """Whether ``basic.nack`` with requeue raises a quorum queue's delivery count
        (before 4.3); ``basic.reject`` with requeue raises it on every version."""
        return "returns" in self.delivery_count_counts

    @property
    def reads_count_toward_limit(self) -> bool:
        """Whether reading a message without ack and returning it (as ``dlq list``
        does) spends a delivery of its limit."""
        return "returns" in self.delivery_count_counts or "channel closes" in (
            self.delivery_count_counts
        )


def facts_for(version: BrokerVersion | None) -> BrokerFacts:
    """The facts for ``version`` (None: unknown, assume the most cautious, 4.0-4.2)."""
    series: Series = version.series if version is not None else "4.0-4.2"
    owns = version is not None and (version.major, version.minor) >= (3, 13)
    if series == "3.x":
        return BrokerFacts(
            version=version,
            series=series,
            delivery_count_counts=("returns", "channel closes", "rejects with requeue"),
            default_delivery_limit=None,
            limit_below_one_drops=True,
            unlimited_argument=None,
            broker_owns_x_headers=owns,
            consumer_timeout_action="channel close",
            native_delayed_retry=False,
            measured=version is not None and (version.major, version.minor) == (3, 10),
            per_consumer_timeout=version is not None and (version.major, version.minor) >= (3, 12),
        )
    if series == "4.0-4.2":
        return BrokerFacts(
            version=version,
            series=series,
            delivery_count_counts=("returns", "channel closes", "rejects with requeue"),
            default_delivery_limit=20,
            limit_below_one_drops=False,
            unlimited_argument=-1,
            broker_owns_x_headers=True,
            consumer_timeout_action="channel close",
            native_delayed_retry=False,
            measured=False,
            per_consumer_timeout=True,
            quorum_priorities="2 levels (normal 0-4, high 5+)",
        )
    return BrokerFacts(
        version=version,
        series=series,
        # 4.3 counts only what signals a failed processing: basic.reject, and the
        # returns of a closed channel or lost connection; basic.nack(requeue) and
        # consumer timeouts no longer count.
        delivery_count_counts=("channel closes", "rejects with requeue"),
        default_delivery_limit=20,
        limit_below_one_drops=False,
        unlimited_argument=-1,
        broker_owns_x_headers=True,
        consumer_timeout_action="basic.cancel",
        native_delayed_retry=True,
        measured=False,
        consumer_timeout_queue_types=("quorum",),
        per_consumer_timeout=True,
        global_qos_refused=True,
        transient_queues_refused=True,
        queue_mode_refused=True,
        quorum_priorities="strict levels 0-31 (no x-max-priority)",
        native_delayed_delivery=version is not None and (version.major, version.minor) >= (4, 4),
    )


FACT_ROWS: tuple[FactRow, ...] = (
    FactRow(
        fact="what counts toward a quorum queue's `x-delivery-limit`",
        values=(
            "every return (nack/reject with requeue, a closed channel or connection)",
            "every return",
            "`basic.reject` with requeue and the returns of a closed channel or lost "
            "connection; `basic.nack` with requeue and consumer timeouts do not count",
        ),
        verified="yes: the crash-loop rows above",
        docs='4.x: "Quorum Queues" (poison message handling), "Negative Acknowledgements" '
        "(4.3), rabbitmq-server discussion #18226",
    ),
    FactRow(
        fact="default delivery limit of a quorum queue",
        values=("none", "20", "20"),
        verified="yes (none)",
        docs='RabbitMQ 4.0 release notes, "Negative Acknowledgements" (4.3)',
    ),
    FactRow(
        fact="`x-delivery-limit` 0 or -1",
        values=(
            "the message is dead-lettered (or dropped) at its first return",
            "-1: no limit",
            "-1: no limit",
        ),
        verified="yes (issue 11's loss-path tests)",
        docs='"Quorum Queues"',
    ),
    FactRow(
        fact="who owns `x-` headers",
        values=(
            "3.10-3.12: clients may set them (the broker interprets a client's `x-death`); "
            "3.13: the broker ignores client-set ones",
            "the broker",
            "the broker",
        ),
        verified="yes (3.10: a client's `x-death` is interpreted)",
        docs='rabbitmq-server PR #11339 ("x-headers belong to the broker" since 3.13)',
    ),
    FactRow(
        fact="a delivery past `consumer_timeout`",
        values=(
            "the channel is closed (PRECONDITION_FAILED)",
            "the channel is closed",
            "`basic.cancel` to clients that support consumer cancel notifications, else a "
            "closed channel (`consumer_timeout_response`)",
        ),
        verified="yes (tests/integration/worker/test_consumer_timeout.py)",
        docs="RabbitMQ 4.3.7 release notes",
    ),
    FactRow(
        fact="queues whose consumers `consumer_timeout` applies to",
        values=("classic and quorum", "classic and quorum", "quorum only"),
        verified="yes (classic and quorum)",
        docs="RabbitMQ 4.3.0 release notes",
    ),
    FactRow(
        fact="`x-consumer-timeout` consumer argument (one consumer's own timeout)",
        values=(
            "3.10-3.11: accepted and ignored; 3.12+: honoured",
            "honoured",
            "honoured",
        ),
        verified="accepted and ignored by 3.10.8 "
        "(tests/integration/worker/test_consumer_timeout.py)",
        docs='"Delivery Acknowledgement Timeout" (3.12+), rabbitmq-server #5437',
    ),
    FactRow(
        fact="`basic.qos` with `global=true`",
        values=("accepted", "accepted", "a channel error"),
        verified="accepted by 3.10.8",
        docs="RabbitMQ 4.3.0 release notes (deprecated features denied by default)",
    ),
    FactRow(
        fact="a non-durable, non-exclusive (transient) queue",
        values=("accepted", "accepted (deprecated)", "refused by default"),
        verified="no",
        docs="RabbitMQ 4.3.0 release notes (`deprecated_features.permit.transient_nonexcl_queues`)",
    ),
    FactRow(
        fact="`x-queue-mode` queue argument",
        values=("accepted", "accepted, no effect", "the declare fails"),
        verified="no",
        docs="RabbitMQ 4.3.0 release notes (classic queue v1 storage removed)",
    ),
    FactRow(
        fact="message priority on a quorum queue",
        values=(
            "none: the `priority` property is ignored, `x-max-priority` refused "
            "(PRECONDITION_FAILED)",
            "2 levels (0-4 normal, 5+ high), shared fairly (about 2:1), not strict",
            "strict levels 0-31",
        ),
        verified="yes, by hand on 3.10.8: `x-max-priority` refused on a quorum queue. rabbitq's "
        "priorities (`App(priorities=N)`, docs/control.md) use one queue per level instead, "
        "on every version, and publish with AMQP priority 0",
        docs="RabbitMQ 4.0 and 4.3 release notes, rabbitmq-server #3973 and #8261, "
        "rabbitmq-website PR #2526 (4.3's quorum priorities)",
    ),
    FactRow(
        fact="broker-side delayed retry on quorum queues",
        values=("no", "no", "yes (queue argument or policy)"),
        verified="yes (none on 3.10)",
        docs='RabbitMQ 4.3.0 release notes ("Quorum queue delayed retry")',
    ),
    *ROWS_4_4,  # what 4.4 added or stopped (amqp.fact_rows)
    *PARTITION_ROWS,  # routing by key and single active consumers (amqp.fact_rows)
)
"""The table in docs/reliability.md ("Broker versions"): the human statement of the facts
:func:`facts_for` encodes, with what each rests on."""


def describe(facts: BrokerFacts) -> list[str]:
    """The facts as short sentences, for the start-up log and ``rabbitq doctor``."""
    name = f"RabbitMQ {facts.version}" if facts.version else "RabbitMQ (version unknown)"
    limit = (
        f"quorum queues have a default delivery limit of {facts.default_delivery_limit}"
        if facts.default_delivery_limit is not None
        else "quorum queues have no delivery limit unless one is set"
    )
    lines = [
        f"{name}: {facts.series} behaviour"
        + ("" if facts.measured else " (from RabbitMQ's documentation; not measured here)"),
        f"{limit}; {', '.join(facts.delivery_count_counts)} count toward it",
        f"a delivery past consumer_timeout gets a {facts.consumer_timeout_action}",
    ]
    if not facts.nack_counts:
        lines.append(
            "basic.nack and consumer timeouts do not raise the delivery count; basic.reject "
            "does (rabbitq rejects only where a failure must count)"
        )
    if facts.consumer_timeout_queue_types != ("classic", "quorum"):
        types = " and ".join(facts.consumer_timeout_queue_types)
        lines.append(f"consumer_timeout applies to {types} queues only")
    if facts.limit_below_one_drops:
        lines.append(
            "an x-delivery-limit of 0 or -1 (rabbitq never sets one) would drop a message "
            "at its first return"
        )
    if facts.broker_owns_x_headers:
        lines.append("the broker ignores x- headers that clients set (x-death included)")
    if facts.native_delayed_delivery:
        lines.append(
            "quorum queues can hold a message until its x-opt-delivery-time (AMQP 1.0); "
            "rabbitq's delays and retries do not use it"
        )
    if facts.version is not None and (facts.version.major, facts.version.minor) > NEWEST_KNOWN:
        lines.append(
            f"newer than {NEWEST_KNOWN[0]}.{NEWEST_KNOWN[1]}, the newest series rabbitq "
            f"knows: assuming it behaves like it"
        )
    return lines


def server_properties(connection: Any) -> Mapping[str, Any] | None:
    """The server properties of an aio-pika connection (None if it is not connected)."""
    transport = getattr(connection, "transport", None)
    underlying = getattr(transport, "connection", None)
    properties = getattr(underlying, "server_properties", None)
    return properties if isinstance(properties, Mapping) else None


def log_broker(connection: Any) -> BrokerFacts:
    """Log which broker the connection reached and what that means, at DEBUG (``rabbitq
    doctor`` says it to whoever asks); return the facts."""
    facts = facts_for(version_from_server_properties(server_properties(connection)))
    for line in describe(facts):
        log.debug("%s", line)
    return facts
