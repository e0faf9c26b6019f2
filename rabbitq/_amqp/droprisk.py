"""Which of a queue's effective settings make the broker drop messages (pure).

rabbitq declares its DLQs so that nothing drops a dead letter (``x-overflow:
reject-publish``, on quorum a delivery limit no read reaches), but an operator's policy
wins over queue arguments for some keys and is applied with the lower value for others,
and a policy that expires a DLQ's messages loses them silently (issue 20: a
``message-ttl`` policy on a quorum DLQ, 50 of 50 dead letters gone 2 s later). rabbitq
cannot stop a policy; it names it: :func:`drop_risks` takes a queue's arguments and its
effective policy definition (the management API merges policy and operator policy) and
returns every setting that drops messages. The worker logs them at start and reports
them as ``rabbitq_dlq_drop_risk`` and in ``/readyz`` (``rabbitq._ops.queue_watch``), and
``rabbitq doctor`` as dangers.

How RabbitMQ 3.10.8 combines an argument and a policy (its ``rabbit_quorum_queue`` and
``rabbit_amqqueue_process``): ``message-ttl``, ``max-length`` and ``max-length-bytes``:
the lower value; ``overflow`` and ``expires``: the policy on quorum queues, the argument
(``overflow``) or the lower value (``expires``) on classic ones; the dead-letter target:
the argument. A queue with a dead-letter target moves what expires or overflows there
rather than dropping it; ``expires`` deletes the queue itself, target or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DROP_SETTINGS = ("message-ttl", "max-length", "max-length-bytes", "expires")
"""The settings :func:`drop_risks` looks at (policy keys; arguments are ``x-`` + key)."""


@dataclass(frozen=True, kw_only=True)
class DropRisk:
    """One setting that makes the broker drop messages from a queue."""

    setting: str
    """``message-ttl``, ``max-length``, ``max-length-bytes`` or ``expires``."""
    value: Any
    source: str
    """``argument``, or the policy that sets it (``policy 'p'``, ``operator policy 'o'``)."""
    effect: str
    """What the broker does, in a few words."""

    def __str__(self) -> str:
        return f"{self.setting} {self.value} ({self.source}): {self.effect}"


def _lookup(
    key: str,
    arguments: Mapping[str, Any],
    policy: Mapping[str, Any],
    policy_source: str,
    combine: str,
) -> tuple[Any, str] | None:
    """The value the broker applies for ``key`` and where it comes from; ``combine``:
    ``min`` (the lower), ``policy`` or ``argument`` (that one when both are set)."""
    argument, from_policy = arguments.get(f"x-{key}"), policy.get(key)
    if argument is None and from_policy is None:
        return None
    if from_policy is None:
        return argument, "argument"
    if argument is None:
        return from_policy, policy_source
    if combine == "min" and isinstance(argument, int) and isinstance(from_policy, int):
        return (argument, "argument") if argument <= from_policy else (from_policy, policy_source)
    if combine == "argument":
        return argument, "argument"
    return from_policy, policy_source


def policy_source(policy: str | None, operator_policy: str | None) -> str:
    """How to name where a policy key comes from (the API does not say which of the two
    set a key when both apply)."""
    names = [f"policy {policy!r}"] if policy else []
    names += [f"operator policy {operator_policy!r}"] if operator_policy else []
    return " / ".join(names) or "policy"


def drop_risks(
    arguments: Mapping[str, Any] | None,
    effective_policy: Mapping[str, Any] | None,
    *,
    policy: str | None = None,
    operator_policy: str | None = None,
) -> list[DropRisk]:
    """Every effective setting that drops messages from a queue with these ``arguments``
    (as declared) and this effective policy definition; empty when none does."""
    arguments = arguments or {}
    defined = effective_policy or {}
    source = policy_source(policy, operator_policy)
    quorum = arguments.get("x-queue-type") == "quorum"
    moved = "x-dead-letter-exchange" in arguments or "dead-letter-exchange" in defined
    risks: list[DropRisk] = []

    def look(key: str, combine: str) -> tuple[Any, str] | None:
        return _lookup(key, arguments, defined, source, combine)

    ttl = look("message-ttl", "min")
    if ttl is not None and not moved:
        risks.append(DropRisk(setting="message-ttl", value=ttl[0], source=ttl[1],
                              effect=f"messages older than {ttl[0]} ms are dropped"))  # fmt: skip
    overflow = look("overflow", "policy" if quorum else "argument")
    if (overflow[0] if overflow else "drop-head") == "drop-head" and not moved:
        for key in ("max-length", "max-length-bytes"):
            if (limit := look(key, "min")) is not None:
                risks.append(DropRisk(setting=key, value=limit[0], source=limit[1],
                                      effect="once full, the oldest messages are dropped "
                                      "(overflow drop-head)"))  # fmt: skip
    expires = look("expires", "policy" if quorum else "min")
    if expires is not None:
        risks.append(DropRisk(setting="expires", value=expires[0], source=expires[1],
                              effect=f"the queue is deleted, with every message in it, after "
                              f"{expires[0]} ms without consumers"))  # fmt: skip
    return risks


def summary(queue: str, risks: list[DropRisk]) -> str:
    """One line: ``emails.dlq drops messages: message-ttl 2000 (policy 'p'): ...``."""
    return f"{queue} drops messages: " + "; ".join(str(r) for r in risks)
