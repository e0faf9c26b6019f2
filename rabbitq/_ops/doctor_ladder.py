"""``rabbitq doctor`` on the delay ladder's catch-all (docs/delays.md, "A queue deleted
while its messages wait"): is ``rabbitq.delay.deliver``'s alternate exchange there, and
how many delayed messages found no queue (pure)."""

from __future__ import annotations

import shlex

from ..ladder.plan import ALTERNATE_EXCHANGE, DELIVER_EXCHANGE, UNDELIVERABLE
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
    if found.held:
        out.append(
            Finding(
                level="warning",
                topic="delays",
                message=f"{UNDELIVERABLE} holds {found.held} delayed message(s) whose "
                "queue did not exist when they fell due (header rabbitq-delay-to names it)",
                fix=f"rabbitq dlq list {UNDELIVERABLE}, then rabbitq dlq replay "
                f"{UNDELIVERABLE} --to QUEUE (or rabbitq dlq purge {UNDELIVERABLE})",
            )
        )
    return out
