"""The rows of the broker facts table (:data:`rabbitq._amqp.brokers.FACT_ROWS`): its
:data:`COLUMNS`, the :class:`FactRow` shape, and the rows about routing by key and
single active consumers that partitions rest on (docs/ordering.md). Pure data."""

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
