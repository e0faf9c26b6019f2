"""``rabbitq doctor`` on a partitioned app (``App(partitions=N)``): is the broker's
consistent-hash exchange there? (:func:`rabbitq._amqp.partitions.probe` asks the broker;
the finding says how to enable the plugin when it is missing.)"""

from __future__ import annotations

from .._amqp.partitions import ENABLE, EXCHANGE_TYPE
from .doctor_facts import Facts, Finding


def findings(facts: Facts) -> list[Finding]:
    """The partitions' finding: a danger when the plugin is missing."""
    if facts.topology.partitioning is None:
        return []
    if facts.partitions_problem is None:
        count = len(facts.topology.partitioning.mains)
        return [
            Finding(
                level="info",
                topic="partitions",
                message=f"{count} partitions through {EXCHANGE_TYPE} "
                f"{facts.topology.partitioning.exchange!r}: the plugin is enabled",
            )
        ]
    return [
        Finding(
            level="danger", topic="partitions", message=facts.partitions_problem, fix=ENABLE
        )
    ]
