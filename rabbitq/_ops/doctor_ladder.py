"""``rabbitq doctor`` on the delay ladder's catch-all (docs/delays.md, "A queue deleted
while its messages wait"): is ``rabbitq.delay.deliver``'s alternate exchange there, and
how many delayed messages found no queue, this app's apart from the others' (pure)."""

from __future__ import annotations

import shlex

from ..ladder.plan import ALTERNATE_EXCHANGE, DELIVER_EXCHANGE, UNDELIVERABLE
from ..ladder.probe import CatchAll
from .doctor_facts import Facts, Finding


def alternate_policy(vhost: str) -> str:
    """The ``rabbitmqctl set_policy`` that gives an existing ``rabbitq.delay.deliver``
    its alternate exchange (an exchange's arguments cannot change)."""
    pattern = "^" + DELIVER_EXCHANGE.replace(".", r"\.") + "$"
    definition = f'{{"{ALTERNATE_EXCHANGE}":"{UNDELIVERABLE}"}}'
    return (
        f"rabbitmqctl set_policy -p {shlex.quote(vhost)} rabbitq-delay-deliver "
        f"{shlex.quote(pattern)} {shlex.quote(definition)} --apply-to exchanges"
    )


def findings(facts: Facts) -> list[Finding]:
    """A warning when the alternate exchange is missing, one when the catch-all holds
    messages."""
    found = facts.delay_catch_all
    if found is None:
        return []
    out: list[Finding] = []
    if found.has_argument is False and not facts.delay_alternate_policy:
        out.append(
            Finding(
                level="warning",
                topic="delays",
                message=f"{DELIVER_EXCHANGE} has no alternate exchange (declared by an "
                "older rabbitq): a delayed message whose queue is gone when it falls due "
                "stays in its quorum level, retried every 3 minutes, and a few dozen such "
                "hold back every app's delayed messages through that level; a classic "
                "level drops it",
                fix=alternate_policy(facts.vhost),
            )
        )
    out += held_findings(found, app_queues(facts))
    return out


def app_queues(facts: Facts) -> set[str]:
    """The queues a delayed message of this app can be delayed for: its queues (lanes
    included) and its partitions'."""
    queues = {spec.name for spec in facts.topology.queues}
    if facts.topology.partitioning is not None:
        queues |= {spec.name for spec in facts.topology.partitioning.queues}
    return queues


def held_findings(found: CatchAll, ours: set[str]) -> list[Finding]:
    """What the catch-all holds: this app's messages are a warning (with the replay to
    their queue); other apps' (the catch-all is the vhost's) one info line."""
    if not found.held:
        return []
    mine = {q: n for q, n in sorted(found.by_queue.items()) if q in ours}
    others = found.held - sum(mine.values())
    out: list[Finding] = []
    if mine:
        named = ", ".join(f"{q}: {n}" for q, n in mine.items())
        out.append(
            Finding(
                level="warning",
                topic="delays",
                message=f"{UNDELIVERABLE} holds {sum(mine.values())} delayed message(s) of "
                f"this app ({named}) whose queue did not exist when they fell due",
                fix=f"rabbitq dlq replay {UNDELIVERABLE} --to {next(iter(mine))} (once the "
                f"queue exists again), or rabbitq dlq list {UNDELIVERABLE}",
            )
        )
    if others > 0:
        unread = max(0, found.held - sum(found.by_queue.values()))
        more = f" ({unread} of them not read: whose is not known)" if unread else ""
        out.append(
            Finding(
                level="info",
                topic="delays",
                message=f"{UNDELIVERABLE} (shared by the vhost's apps) holds {others} "
                f"delayed message(s) of other queues than this app's{more}: header "
                "rabbitq-delay-to names each one's queue",
                fix=f"rabbitq dlq list {UNDELIVERABLE}",
            )
        )
    return out
