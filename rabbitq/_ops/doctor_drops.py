"""``rabbitq doctor``'s findings about a DLQ whose settings drop dead letters (pure):
one danger per setting (``rabbitq._amqp.droprisk``), each with its own fix."""

from __future__ import annotations

from dataclasses import replace

from .._amqp.droprisk import DropRisk, drop_risks
from .._amqp.topology import QueueSpec
from .doctor_facts import Finding, QueueState


def dlq_drops(spec: QueueSpec, state: QueueState) -> tuple[list[Finding], QueueState]:
    """A danger per DLQ setting that drops dead letters, and the state without those
    settings for doctor's policy check (which says the rest: limits that refuse,
    reads)."""
    arguments = state.arguments if state.arguments is not None else spec.arguments
    risks = drop_risks(arguments, state.effective_policy, policy=state.policy,
                       operator_policy=state.operator_policy)  # fmt: skip
    findings = [
        Finding(level="danger", topic="policies", message=f"{spec.name} drops dead letters: {r}",
                fix=drop_fix(r))
        for r in risks
    ]  # fmt: skip
    said = {r.setting for r in risks} | {"message-ttl", "expires"}
    rest = {k: v for k, v in state.effective_policy.items() if k not in said}
    return findings, replace(state, effective_policy=rest)


def drop_fix(risk: DropRisk) -> str:
    where = f"the {risk.source}" if risk.source != "argument" else "the queue's arguments"
    moved = f"or give {where} a dead-letter target (dead-letter-exchange, -routing-key)"
    if risk.setting == "expires":
        return f"remove expires from {where} (the queue itself is deleted)"
    if risk.setting == "message-ttl":
        return f"remove message-ttl from {where}, {moved}"
    return (f'add "overflow": "reject-publish" to {where} (the worker then holds what does '
            f"not fit), remove the limit, {moved}")  # fmt: skip
