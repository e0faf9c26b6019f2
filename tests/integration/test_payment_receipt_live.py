"""The payment receipt example against a real RabbitMQ and Redis: the lines captured in
parallel, one receipt with every line; a declined line sends one PaymentFailed, and its
replay completes the receipt."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from decimal import Decimal

import pytest

from examples import payment_receipt
from examples.payment_receipt import SandboxGateway, SandboxMailer
from rabbitq import App, Worker, dlq
from rabbitq.effects import RedisStore
from rabbitq.status import GroupStatus
from tests.helpers import REDIS_URL, Recorder, declare_topology, running, wait_for

pytestmark = pytest.mark.broker


async def test_one_receipt_after_every_line_is_captured(
    make_app: Callable[..., App], connection, redis_prefix, broker_url
):
    gateway, mailer = SandboxGateway(), SandboxMailer()
    app = make_app(
        create=payment_receipt.create_app,
        store=RedisStore(REDIS_URL, key_prefix=redis_prefix),
        gateway=gateway,
        mailer=mailer,
    )
    await declare_topology(connection, app)
    items = [("book", Decimal("12.50")), ("pen", Decimal("2.20")), ("lamp", Decimal("30.00"))]
    await payment_receipt.pay_for(app, uuid.uuid4(), "ada@example.com", items)
    declined = [("book", Decimal("12.50")), ("card test", Decimal("13.13"))]
    await payment_receipt.pay_for(app, uuid.uuid4(), "bob@example.com", declined)
    recorder = Recorder()
    async with running(Worker(app, hooks=recorder)):
        await wait_for(lambda: len(mailer.sent) == 2, timeout=20)
        sent = sorted(mailer.sent.values())
        assert sent[0][:2] == ("ada@example.com", "Your receipt: 44.70")
        assert "lamp: 30.00" in sent[0][2]
        assert sent[1][:2] == ("bob@example.com", "Your payment did not go through")
        assert len(gateway.captured) == 4
        await wait_for(lambda: recorder.count("dead_lettered") == 1)
        gateway.capture = _accepting(gateway)  # type: ignore[method-assign]
        assert (await dlq.replay(app.queue, url=broker_url)).done == 1
        await wait_for(lambda: len(mailer.sent) == 3, timeout=20)
    receipts = [m for m in mailer.sent.values() if m[0] == "bob@example.com"]
    assert sorted(m[1] for m in receipts) == [
        "Your payment did not go through",
        "Your receipt: 25.63",
    ]


async def test_the_scripts_run_prints_the_status_command_that_shows_it_worked(
    make_app: Callable[..., App], redis_prefix, capsys
):
    app = make_app(
        create=payment_receipt.create_app,
        store=RedisStore(REDIS_URL, key_prefix=redis_prefix),
        mailer=(mailer := SandboxMailer()),
    )
    async with running(Worker(app)):
        gid = await payment_receipt.main(app, "myapp:app")
        printed = capsys.readouterr().out.splitlines()
        assert printed[-1] == f"its progress, lines and receipt: rabbitq status myapp:app {gid}"
        await wait_for(lambda: len(mailer.sent) == 1, timeout=20)

        async def complete() -> bool:
            status = await app.status(gid)
            return isinstance(status, GroupStatus) and status.complete

        await wait_for(complete, timeout=20)


def _accepting(gateway: SandboxGateway):  # type: ignore[no-untyped-def]
    async def capture(amount: Decimal, *, idempotency_key: str) -> str:
        gateway.captured.setdefault(idempotency_key, amount)
        return f"ref-{idempotency_key[:8]}"

    return capture
