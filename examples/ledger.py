"""An account ledger: deposits and withdrawals applied per account, in order.

A withdrawal must see every deposit published before it, so both handlers are
``ordered_by`` the account: one entry of an account at a time, in the order published,
a failed one retried (in the worker, holding the account) before the next; different
accounts run concurrently, and over 4 partitions across workers
(``App(partitions=4)``: the consistent-hash exchange, one active worker per partition;
see docs/ordering.md). A withdrawal the balance does not cover is dead-lettered and
*blocks* its account (``on_dead="block"``): later entries of it go to the DLQ behind
it until an operator has looked (replaying the DLQ runs the withdrawal first: if it
succeeds it unblocks the account and the others follow in order; if it fails again the
others go back to the DLQ behind it, unless the operator replays them with
``rabbitq dlq replay --unblock``). A deposit that fails for good skips (the default):
later entries go on.

Run a worker from the repository root (it declares ``example-ledger.p0`` .. ``p3``,
their stand-by retry queues, ``example-ledger.dlq`` and the consistent-hash exchange
``example-ledger.partitions`` behind the exchange ``examples``; the broker needs the
plugin that ships with it: ``rabbitmq-plugins enable
rabbitmq_consistent_hash_exchange``)::

    rabbitq worker examples.ledger:app --processes 2

and, in another shell, publish the samples (three accounts; ``acct-3`` withdraws more
than it has, so its last entry waits in the DLQ behind that one)::

    python -m examples.ledger
    rabbitq dlq list example-ledger

Entries carry a number per account (``entry``): the ledger applies an account's entry
once (a redelivered one is recognised and skipped: delivery is at-least-once), and a
number out of sequence would show an ordering bug rather than be applied.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from decimal import Decimal
from typing import Protocol

from rabbitq import App, Context, Message, PermanentError, RetryPolicy

log = logging.getLogger("examples.ledger")

EXCHANGE = os.environ.get("EXAMPLES_EXCHANGE", "examples")


class Deposit(Message, type="ledger.deposit"):
    account_id: str
    entry: int  # 1, 2, 3 ... per account, in the order published
    amount: Decimal


class Withdraw(Message, type="ledger.withdraw"):
    account_id: str
    entry: int
    amount: Decimal


class InsufficientFunds(PermanentError):
    """The balance does not cover the withdrawal (dead-lettered: no retry helps)."""


class Ledger(Protocol):
    """Where balances live (a database table in a real service)."""

    async def apply(self, account_id: str, entry: int, delta: Decimal) -> Decimal: ...


class MemoryLedger:
    """Balances in memory: applies each account's entries once, in sequence."""

    def __init__(self) -> None:
        self.balances: dict[str, Decimal] = {}
        self.applied: dict[str, list[int]] = {}  # account -> entries, as applied

    async def apply(self, account_id: str, entry: int, delta: Decimal) -> Decimal:
        done = self.applied.setdefault(account_id, [])
        if entry in done:  # redelivered after it was applied: at-least-once
            return self.balances[account_id]
        balance = self.balances.get(account_id, Decimal(0)) + delta
        if balance < 0:
            raise InsufficientFunds(f"{account_id}: balance {balance + -delta}, withdraw {-delta}")
        self.balances[account_id] = balance
        done.append(entry)
        return balance


def create_app(
    *,
    queue: str = "example-ledger",
    exchange: str = EXCHANGE,
    url: str | None = None,
    ledger: Ledger | None = None,
    partitions: int = 4,
    retry: RetryPolicy = RetryPolicy(delays=(1, 5)),  # noqa: B008 (frozen, shared safely)
) -> App:
    """The ledger service; tests pass their own names, ledger and partitions."""
    app = App(queue=queue, exchange=exchange, url=url, partitions=partitions, retry=retry)
    book: Ledger = ledger if ledger is not None else MemoryLedger()

    @app.handler(Deposit, ordered_by=lambda m: m.account_id, timeout=10)
    async def deposit(msg: Deposit, ctx: Context) -> None:
        balance = await book.apply(msg.account_id, msg.entry, msg.amount)
        log.info("%s #%d +%s = %s", msg.account_id, msg.entry, msg.amount, balance)

    @app.handler(Withdraw, ordered_by=lambda m: m.account_id, on_dead="block", timeout=10)
    async def withdraw(msg: Withdraw, ctx: Context) -> None:
        balance = await book.apply(msg.account_id, msg.entry, -msg.amount)
        log.info("%s #%d -%s = %s", msg.account_id, msg.entry, msg.amount, balance)

    return app


app = create_app()

SAMPLES: tuple[Deposit | Withdraw, ...] = (
    Deposit(account_id="acct-1", entry=1, amount=Decimal("100.00")),
    Withdraw(account_id="acct-1", entry=2, amount=Decimal("30.00")),
    Deposit(account_id="acct-2", entry=1, amount=Decimal("5.00")),
    Deposit(account_id="acct-3", entry=1, amount=Decimal("10.00")),
    Withdraw(account_id="acct-3", entry=2, amount=Decimal("50.00")),  # dead: blocks acct-3
    Deposit(account_id="acct-3", entry=3, amount=Decimal("60.00")),  # to the DLQ behind it
    Withdraw(account_id="acct-1", entry=3, amount=Decimal("70.00")),  # 0 left: fine
)


async def publish_samples(target: App = app) -> list[str]:
    """Publish :data:`SAMPLES` in order (each confirmed before the next)."""
    async with target.publisher() as pub:
        return [await pub.publish(sample) for sample in SAMPLES]


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ids = asyncio.run(publish_samples())
    print(f"published {len(ids)} ledger entries to {app.exchange!r}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
