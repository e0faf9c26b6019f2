"""examples/ledger.py, tested as its users would: with rabbitq.testing, no broker."""

from __future__ import annotations

from decimal import Decimal

from examples.ledger import Deposit, MemoryLedger, Withdraw, create_app
from rabbitq._amqp.partitions import order_key
from rabbitq.testing import deliver


async def test_entries_apply_once_and_an_overdraft_is_dead_lettered():
    book = MemoryLedger()
    app = create_app(ledger=book)

    assert (await deliver(app, Deposit(account_id="a", entry=1, amount=Decimal("10")))).acked
    again = await deliver(app, Deposit(account_id="a", entry=1, amount=Decimal("10")))
    overdraft = await deliver(app, Withdraw(account_id="a", entry=2, amount=Decimal("50")))

    assert again.acked and book.balances == {"a": Decimal("10")}
    assert overdraft.dead_lettered and overdraft.reason == "permanent"


def test_the_ledger_is_ordered_by_account_over_four_partitions():
    app = create_app()
    assert app.partitions == 4
    assert {h.on_dead for h in app.handlers.values()} == {"skip", "block"}
    assert order_key(app, Deposit(account_id="acct-1", entry=1, amount=Decimal(1))) == "acct-1"
    assert app.topology().partitioning.mains == tuple(f"example-ledger.p{i}" for i in range(4))
