"""``rabbitq doctor``'s decisions: from facts about an app and its broker, the findings
(pure; the facts are :mod:`rabbitq._ops.doctor_facts`, ``rabbitq._ops.doctor_probe``
gathers them, ``rabbitq.cli.doctor`` prints the findings).

A finding is ``danger`` when messages can be lost or a worker cannot run as things
stand (the command then exits non-zero), ``warning`` when something deserves a look,
``info`` otherwise. Every danger and warning carries its fix in one line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._amqp.brokers import BrokerFacts, describe
from .._amqp.topology import DLQ_DELIVERY_LIMIT, QueueSpec, Topology, delay_label
from .._worker.consumer_args import consumer_arguments, enforced_timeout
from .._worker.consumer_timeout import DEFAULT_CONSUMER_TIMEOUT, timeout_problems
from . import doctor_ladder, doctor_partitions, doctor_stores
from .doctor_drops import dlq_drops
from .doctor_facts import LEVELS, Facts, Finding, Level, QueueState


def diagnose(facts: Facts) -> list[Finding]:
    """Every finding, in the order: broker, queues, retry queues, timeouts, alarms,
    partitions, the delay ladder, the Redis stores, policies."""
    findings = _broker(facts)
    findings += _management(facts)
    findings += _queues(facts)
    findings += _orphans(facts)
    findings += _timeouts(facts)
    findings += _alarms(facts)
    findings += doctor_partitions.findings(facts)
    findings += doctor_ladder.findings(facts)
    findings += doctor_stores.findings(facts)
    for spec in facts.topology.queues:
        state = facts.queues.get(spec.name)
        if state is not None and state.exists:
            if spec.kind == "dlq":  # what drops dead letters: rabbitq._amqp.droprisk's dangers
                drops, state = dlq_drops(spec, state)
                findings += drops
            findings += _policy(spec, state, facts.broker)
    return findings


def worst(findings: Sequence[Finding]) -> Level:
    """The most serious level among ``findings`` (``info`` for none)."""
    return max((f.level for f in findings), key=LEVELS.index, default="info")


# -- the broker ----------------------------------------------------------------------


def _broker(facts: Facts) -> list[Finding]:
    broker = facts.broker
    findings = [Finding(level="info", topic="broker", message=line) for line in describe(broker)]
    dlq = facts.topology.dlq
    state = facts.queues.get(dlq.name)
    arguments = state.arguments if state and state.arguments is not None else dlq.arguments
    policy = state.effective_policy if state else {}
    if arguments.get("x-queue-type") == "quorum" and "x-dead-letter-exchange" not in arguments:
        limit = _delivery_limit(arguments, policy, broker)
        # rabbitq declares its DLQs with a limit that no number of reads reaches
        if limit is not None and limit < DLQ_DELIVERY_LIMIT and broker.reads_count_toward_limit:
            findings.append(
                Finding(
                    level="danger",
                    topic="broker",
                    message=f"{dlq.name} is a quorum queue with a delivery limit of {limit} on "
                    f"RabbitMQ {broker.version or '(unknown)'}, and no dead-letter target: "
                    f"every read (rabbitq dlq list/show returns what it reads) counts, and "
                    f"a message read {limit} times is dropped",
                    fix=_dlq_limit_fix(dlq.name, broker),
                )
            )
    return findings


def _delivery_limit(
    arguments: Mapping[str, Any], policy: Mapping[str, Any], broker: BrokerFacts
) -> int | None:
    """The delivery limit the broker applies to a quorum queue (None: unlimited)."""
    values = [v for v in (arguments.get("x-delivery-limit"), policy.get("delivery-limit"))
              if isinstance(v, int)]  # fmt: skip
    if not values:
        return broker.default_delivery_limit
    limit = min(values)  # the broker applies the lower of argument and policy
    if limit < 1:
        return 0 if broker.limit_below_one_drops else None
    return limit


def _dlq_limit_fix(dlq: str, broker: BrokerFacts) -> str:
    if broker.unlimited_argument is None:
        return f"remove the delivery-limit policy from {dlq} (on 3.x, no limit is the default)"
    return (
        f"rabbitmqctl set_policy --apply-to queues rabbitq-dlq '^{_regex(dlq)}$' "
        f"'{{\"delivery-limit\":{broker.unlimited_argument}}}' (no limit), "
        f"or redeclare {dlq} with x-delivery-limit {broker.unlimited_argument}"
    )


def _management(facts: Facts) -> list[Finding]:
    if facts.management_error is None:
        return []
    return [
        Finding(
            level="warning",
            topic="management",
            message=f"the management API at {facts.management_url} did not answer "
            f"({facts.management_error}): policies, alarms and orphaned retry queues were "
            f"not checked",
            fix="rabbitmq-plugins enable rabbitmq_management, or pass --management-url",
        )
    ]


# -- the app's queues ----------------------------------------------------------------


def _queues(facts: Facts) -> list[Finding]:
    findings = []
    for spec in facts.topology.queues:
        state = facts.queues.get(spec.name)
        if state is None:
            continue
        if not state.exists:
            findings.append(
                Finding(
                    level="info",
                    topic="queues",
                    message=f"{spec.name} is not declared yet: the worker declares it at start",
                )
            )
            continue
        if state.stuck and spec.kind != "dlq":
            findings.append(
                Finding(
                    level="danger",
                    topic="queues",
                    message=f"{spec.name} holds {state.stuck} dead-lettered message(s) it has "
                    f"not handed on to {_target(spec, facts.topology)}: no worker can reach "
                    f"them until the broker sends them again (its target was missing when "
                    f"they were dead-lettered: about 3 minutes, measured on 3.10.8; or the "
                    f"queue's leader died: seen to last on 3.10.8)",
                    fix="a policy change on the queue sends them at once (rabbitmqctl "
                    f"set_policy rabbitq-touch '^{_regex(spec.name)}$' '{{\"max-length\":"
                    "1000000000}' --apply-to queues, then clear_policy rabbitq-touch); if "
                    "they stay, upgrade RabbitMQ past the at-least-once dead-letter worker "
                    "fixes (rabbitmq-server PR #7677, backported to 3.10.x)",
                )
            )
        for drift in _drift(spec, state):
            findings.append(
                Finding(
                    level="danger",
                    topic="queues",
                    message=f"{spec.name}: {drift}; a worker will refuse to start "
                    f"(PRECONDITION_FAILED when it declares the queue)",
                    fix=f"drain {spec.name} (rabbitq dlq export / let workers finish), delete "
                    f"it and let the worker redeclare it, or deploy the app's old settings",
                )
            )
    return findings


def _target(spec: QueueSpec, topology: Topology) -> str:
    return topology.main.name if spec.kind == "retry" else topology.dlq.name


def _drift(spec: QueueSpec, state: QueueState) -> list[str]:
    if state.arguments is not None:
        out = []
        for key in sorted(set(spec.arguments) | set(state.arguments)):
            want, have = spec.arguments.get(key), state.arguments.get(key)
            if want != have:
                out.append(f"argument {key} is {have!r} on the broker, the app declares {want!r}")
        return out
    return [state.mismatch] if state.mismatch else []


def _orphans(facts: Facts) -> list[Finding]:
    """Retry queues of this app's queue that no handler uses any more (a delay changed
    or a handler went away): empty, safe to delete; holding messages that come back by
    their TTL, wait; holding messages that never come back, move them."""
    if facts.other_queues is None:
        return []
    main = facts.topology.main.name
    prefix = f"{main}.retry."
    known = {spec.name for spec in facts.topology.retries}
    delays = ", ".join(delay_label(s.ttl_ms or 0) for s in facts.topology.retries) or "none"
    unused = f"no handler uses it any more (this app's delays: {delays})"
    prune = "rabbitq topology MODULE:APP --prune (it deletes only an empty, unused one)"
    findings = []
    for name, depth in sorted(facts.other_queues.items()):
        if not name.startswith(prefix) or name in known:
            continue
        arguments = (facts.other_arguments or {}).get(name)
        back = _returns_to(arguments, main)
        if not depth:
            findings.append(
                Finding(
                    level="info",
                    topic="retry queues",
                    message=f"{name} is empty and {unused}: safe to delete",
                    fix=prune,
                )
            )
        elif back is False:
            findings.append(
                Finding(
                    level="danger",
                    topic="retry queues",
                    message=f"{name} holds {depth} message(s) that never come back to {main}: "
                    f"{unused}, no worker consumes it, and it has no TTL with a dead-letter "
                    f"target of {main}",
                    fix=f"move them to {main} with a shovel (rabbitmq-plugins enable "
                    f"rabbitmq_shovel; rabbitmqctl set_parameter shovel rabbitq-{name} "
                    f"'{_shovel(name, main)}'), then {prune}",
                )
            )
        else:
            ttl = f" ({delay_label(arguments['x-message-ttl'])})" if back and arguments else ""
            findings.append(
                Finding(
                    level="warning",
                    topic="retry queues",
                    message=f"{name} holds {depth} message(s) and {unused}: they come back to "
                    f"{main} when its TTL{ttl} runs out"
                    + ("" if back else " (if its arguments still say so: not checked)")
                    + "; nothing new goes there",
                    fix=f"let them come back, then {prune}",
                )
            )
    return findings


def _shovel(source: str, target: str) -> str:
    """A dynamic shovel's definition that moves what ``source`` holds to ``target``
    once, then deletes itself."""
    return json.dumps(
        {"src-uri": "amqp://", "src-queue": source, "dest-uri": "amqp://",
         "dest-queue": target, "src-delete-after": "queue-length"},
        separators=(",", ":"),
    )  # fmt: skip


def _returns_to(arguments: Mapping[str, Any] | None, main: str) -> bool | None:
    """Does a queue with these arguments dead-letter what it holds to ``main`` when its
    TTL runs out? None: its arguments are not known."""
    if arguments is None:
        return None
    ttl = arguments.get("x-message-ttl")
    return (
        isinstance(ttl, int)
        and arguments.get("x-dead-letter-exchange") == ""
        and arguments.get("x-dead-letter-routing-key") == main
    )


# -- limits and alarms ---------------------------------------------------------------


def _timeouts(facts: Facts) -> list[Finding]:
    timeout = facts.consumer_timeout
    timeout = DEFAULT_CONSUMER_TIMEOUT if timeout is None else timeout
    main = facts.queues.get(facts.topology.main.name)
    if main is not None:  # a per-queue consumer-timeout policy (3.12+) wins
        per_queue = main.effective_policy.get("consumer-timeout")
        if isinstance(per_queue, int) and per_queue > 0:
            timeout = per_queue / 1000
    broker, queue_type = facts.broker, facts.topology.main.arguments.get("x-queue-type")
    asked = consumer_arguments(facts.handlers, consumer_timeout=timeout)  # as the worker does
    timeout = enforced_timeout(configured=timeout, arguments=asked,
                               queue_type=queue_type or "classic",
                               timeout_queue_types=broker.consumer_timeout_queue_types,
                               per_consumer_timeout=broker.per_consumer_timeout)  # fmt: skip
    action = facts.broker.consumer_timeout_action
    findings = [
        Finding(
            level="warning",
            topic="timeouts",
            message=f"{problem} (RabbitMQ {facts.broker.series} answers with a {action})",
            fix="set a handler timeout below it (@app.handler(..., timeout=S)) or raise the "
            "broker's consumer_timeout (and RABBITQ_CONSUMER_TIMEOUT)",
        )
        for problem in timeout_problems(facts.handlers, timeout)
    ]
    if not findings and timeout:
        findings.append(
            Finding(
                level="info",
                topic="timeouts",
                message=f"every handler's timeout is below consumer_timeout ({timeout:g}s"
                f"{', assumed: RabbitMQ default' if facts.consumer_timeout is None else ''})",
            )
        )
    return findings


def _alarms(facts: Facts) -> list[Finding]:
    if facts.alarms is None:
        return []
    return [
        Finding(
            level="danger",
            topic="alarms",
            message=f"{alarm}: the broker blocks every publisher, retry and DLQ copies included",
            fix="free memory or disk on that node (or raise vm_memory_high_watermark / "
            "disk_free_limit); see rabbitmq-diagnostics alarms",
        )
        for alarm in facts.alarms
    ]


# -- policies ------------------------------------------------------------------------


def _policy(spec: QueueSpec, state: QueueState, broker: BrokerFacts) -> list[Finding]:
    policy = state.effective_policy
    if not policy:
        return []
    names = " and ".join(
        f"{kind} {name!r}"
        for kind, name in (("policy", state.policy), ("operator policy", state.operator_policy))
        if name
    )
    remove = f"change or remove the {names or 'policy'} that matches {spec.name}"
    arguments = state.arguments if state.arguments is not None else spec.arguments
    # Without a dead-letter target, what the broker expires or pushes out is gone.
    drops = "dropped" if "x-dead-letter-exchange" not in arguments else "dead-lettered unhandled"
    findings = []

    def add(level: Level, message: str, fix: str = remove) -> None:
        findings.append(Finding(level=level, topic="policies", message=message, fix=fix))

    length = [k for k in ("max-length", "max-length-bytes") if k in policy]
    if length:
        overflow = policy.get("overflow") or arguments.get("x-overflow") or "drop-head"
        if overflow in ("drop-head", None):
            add(
                "danger" if drops == "dropped" or spec.kind == "main" else "warning",
                f"{spec.name}: {names} sets {', '.join(f'{k}={policy[k]}' for k in length)} "
                f"with overflow {overflow}: once full, the oldest messages are {drops}",
                f'{remove}, or add "overflow": "reject-publish" to it',
            )
        else:
            add(
                "warning",
                f"{spec.name}: {names} limits its length ({', '.join(length)}) with "
                f"overflow {overflow}: once full, copies to it are refused and the worker "
                f"holds the messages until there is room",
            )
    if "message-ttl" in policy:
        ttl = policy["message-ttl"]
        if spec.kind == "retry":
            add(
                "warning",
                f"{spec.name}: {names} sets message-ttl {ttl} ms; the lower of it and the "
                f"queue's {spec.ttl_ms} ms applies, so retries come back sooner than planned",
            )
        else:
            add(
                "danger",
                f"{spec.name}: {names} sets message-ttl {ttl} ms: messages older than that "
                f"are {drops}",
            )
    if "expires" in policy:
        add(
            "danger",
            f"{spec.name}: {names} sets expires {policy['expires']} ms: the queue is deleted, "
            f"with every message in it, after that long without consumers"
            + (" (a DLQ has none most of the time)" if spec.kind == "dlq" else ""),
        )
    if spec.kind == "dlq" and "delivery-limit" in policy and drops == "dropped":
        limit = _delivery_limit(arguments, policy, broker)
        if limit is not None:
            add(
                "danger",
                f"{spec.name}: {names} sets delivery-limit {policy['delivery-limit']}: a dead "
                f"letter read (and returned) {limit} times by rabbitq dlq list/show is dropped",
                _dlq_limit_fix(spec.name, broker),
            )
    return findings


def _regex(name: str) -> str:
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in name)
