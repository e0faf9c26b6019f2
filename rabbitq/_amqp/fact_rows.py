"""The rows of the broker facts table (:data:`rabbitq._amqp.brokers.FACT_ROWS`): its
:data:`COLUMNS`, the :class:`FactRow` shape, the rows of what RabbitMQ 4.4 added or
stopped, and the rows about routing by key and single active consumers that partitions
rest on (docs/ordering.md). Pure data."""

from __future__ import annotations

from dataclasses import dataclass

COLUMNS = ("3.10-3.13", "4.0-4.2", "4.3", "4.4")
"""The versions the table has a column for: :attr:`FactRow.values`, then
:attr:`FactRow.in_4_4`."""

SAME_AS_4_3 = "as 4.3"
"""A 4.4 value: the RabbitMQ 4.4.0 release notes list no change to this fact."""


@dataclass(frozen=True, kw_only=True)
class FactRow:
    """One row of the broker facts table: what each series does, and on what it rests."""

    fact: str
    values: tuple[str, str, str]
    """3.10-3.13, 4.0-4.2, 4.3."""
    in_4_4: str = SAME_AS_4_3
    """4.4 (the ``4.3+`` series of :mod:`~rabbitq._amqp.brokers`, which decides the same
    for it): what changed, else :data:`SAME_AS_4_3`."""
    verified: str
    """What was verified on this project's RabbitMQ 3.10.8, and how ("no": nothing)."""
    docs: str
    """The RabbitMQ documentation or release notes the rest rests on."""


ROWS_4_4: tuple[FactRow, ...] = (
    FactRow(
        fact="a quorum queue holding a message until a time (native delayed delivery)",
        values=(
            "no",
            "no",
            "only a returned message: `x-opt-delivery-time` with AMQP 1.0's `modified` "
            "outcome (delayed retry)",
        ),
        in_4_4="yes: a message waits until its `x-opt-delivery-time` annotation (AMQP 1.0; "
        "the `DELAYED_DELIVERY` connection capability); a dead-lettered message keeps it. "
        "The documentation found names no AMQP 0-9-1 way to set it",
        verified="no: no 4.4 runs here, and 3.10.8 has none. rabbitq sets no "
        "`x-opt-delivery-time` (it publishes over AMQP 0-9-1), so its delays (the ladder), "
        "retries (TTL queues) and dead letters are the same on 4.4",
        docs='the `rabbitmq_delayed_message_exchange` README ("Starting with RabbitMQ 4.4, '
        'quorum queues natively support message delivery delay"), "Quorum Queues" '
        "(4.3, explicit delivery time), rabbitmq-server #17288 and #17326; not in the "
        "4.4.0 release notes",
    ),
    FactRow(
        fact="`x-amqp-1.0-*` headers and `x-basic-*` annotations (AMQP 1.0 sections "
        "written by 3.13 and earlier)",
        values=("written (AMQP 1.0 plugin) and read", "read, no longer written", "read"),
        in_4_4="no longer parsed: converted like any other `x-` header",
        verified="no (rabbitq writes no `x-` header and reads neither)",
        docs="RabbitMQ 4.4.0 release notes (breaking changes)",
    ),
)
"""What RabbitMQ 4.4 added or stopped (from its documentation: no 4.4 runs here);
appended to :data:`rabbitq._amqp.brokers.FACT_ROWS`. The first row is what
``BrokerFacts.native_delayed_delivery`` decides from."""

PARTITION_ROWS: tuple[FactRow, ...] = (
    FactRow(
        fact="`x-consistent-hash` exchange (what `App(partitions=N)` routes through)",
        values=(
            "the `rabbitmq_consistent_hash_exchange` plugin, shipped, off by default; "
            "`hash-header` hashes a header's value, a message without it all goes to one queue",
            "the same plugin",
            "the same plugin",
        ),
        verified="yes: hash-header routing (tests/chaos/test_ordering_proof.py), a message "
        "without the header all to one of 3 queues (30 of 30), the plugin enabled without a "
        "restart, and without it the declare closes the connection (COMMAND_INVALID)",
        docs='"Consistent Hash Exchange" (the plugin\'s README)',
    ),
    FactRow(
        fact="`x-modulus-hash` exchange",
        values=(
            "none (declaring it closes the connection: unknown exchange type)",
            "none",
            "built in: hash of the routing key modulo the number of bindings, stable while "
            "the bindings stay, binding keys ignored",
        ),
        verified="yes (none on 3.10.8: COMMAND_INVALID - unknown exchange type)",
        docs='"Modulus Hash Exchange" (4.3)',
    ),
    FactRow(
        fact="consumer priority (`x-priority`) with single active consumer",
        values=(
            "ignored: the first consumer to subscribe stays the active one",
            "quorum queues: the highest-priority consumer becomes the active one (the "
            "switch waits until the active consumer has no unacknowledged messages)",
            "the same",
        ),
        verified="yes for 3.10.8 (a consumer with x-priority 10 that subscribed second got "
        "0 of 10 messages, classic and quorum); 4.x: no",
        docs='"Single Active Consumer" and "Consumer Priorities" (4.x)',
    ),
    FactRow(
        fact="`queue.declare-ok` consumer count of a single-active-consumer queue",
        values=(
            "classic: every consumer, waiting ones included; quorum: the active one only",
            "not documented",
            "not documented",
        ),
        verified="yes for 3.10.8 (3 consumers: classic 3, quorum 1); 4.x: no",
        docs="none found (rabbitq gives quorum partitions back without asking)",
    ),
)
"""Appended to :data:`rabbitq._amqp.brokers.FACT_ROWS`."""
