"""``rabbitq doctor`` on an app's Redis stores: does the Redis keep its data across a
restart? (pure; ``rabbitq._ops.doctor_probe`` reads ``CONFIG GET appendonly`` and
``save``.) Cancellations need an AOF to outlive a restart; without any persistence a
restart also loses the debounce records (their messages then run, stale ones too), the
unique and idempotency keys and the status (docs/control.md, "What the stores must
keep")."""

from __future__ import annotations

from ..effects.epoch import persistence_problem
from .doctor_facts import Facts, Finding, StoreFacts

FIX = (
    "redis-cli CONFIG SET appendonly yes, and appendonly yes in redis.conf "
    '(docs/control.md, "What the stores must keep")'
)


def findings(facts: Facts) -> list[Finding]:
    """One finding per Redis the app keeps its stores in."""
    return [_one(store) for store in facts.stores]


def _one(store: StoreFacts) -> Finding:
    where = f"Redis {store.where}"
    if store.error is not None:
        return Finding(
            level="warning",
            topic="stores",
            message=f"{where} did not answer ({store.error}): its persistence was not checked",
            fix="start it, or check the app's backend URL",
        )
    if store.appendonly is None and store.save is None:
        return Finding(
            level="info",
            topic="stores",
            message=f"{where} refused CONFIG GET (renamed, as on managed Redis): check "
            f"that it keeps an AOF (appendonly yes) yourself",
        )
    problem = persistence_problem(store.appendonly, store.save)
    if problem is not None:
        return Finding(
            level="warning",
            topic="stores",
            message=f"{where}: {problem}: cancelled messages then run, debounced ones "
            f"run stale payloads, unique and idempotency keys and status are forgotten",
            fix=FIX,
        )
    if (store.appendonly or "").lower() != "yes":
        return Finding(
            level="warning",
            topic="stores",
            message=f"{where} keeps RDB snapshots only (save {store.save!r}): a restart "
            f"loses what was written since the last one, cancellations included",
            fix=FIX,
        )
    return Finding(level="info", topic="stores", message=f"{where} keeps an AOF (appendonly yes)")
