"""The bulk mail example (examples/bulk_mail.py), tested as its users would: with
rabbitq.testing.deliver_batch, no broker. Its live test is
tests/integration/test_bulk_mail_live.py."""

from __future__ import annotations

from examples import bulk_mail
from examples.bulk_mail import SandboxProvider
from rabbitq.effects import RedisStore
from rabbitq.testing import deliver_batch
from tests.helpers import REDIS_URL


async def test_the_samples_go_out_in_calls_of_100_bounces_dead_lettered_throttled_retried():
    provider = SandboxProvider()
    app = bulk_mail.create_app(provider=provider)
    mails = bulk_mail.samples(250)
    results = await deliver_batch(app, mails)

    assert provider.calls == [100, 100, 50]
    outcomes = {i: r.outcome for i, r in enumerate(results) if not r.acked}
    assert outcomes == {7: "dead-letter", 42: "retry", 150: "dead-letter"}
    assert results[7].reason == "permanent" and "hard bounce" in (results[7].error or "")
    assert results[42].delay == "5s" and results[42].next_attempt == 2
    assert len(provider.sent) == 247


async def test_with_a_store_a_mail_sent_before_is_a_duplicate_not_sent_again(redis_prefix):
    provider = SandboxProvider()
    store = RedisStore(REDIS_URL, key_prefix=redis_prefix)
    app = bulk_mail.create_app(provider=provider, idempotency=store)
    mails = bulk_mail.samples(5)
    try:
        await deliver_batch(app, mails, message_ids=["a", "b", "c", "d", "e"])
        again = await deliver_batch(app, mails[:2], message_ids=["a", "z"])
    finally:
        await store.close()
    assert [r.duplicate for r in again] == [True, False]
    assert provider.calls == [5, 1] and sorted(provider.sent) == ["a", "b", "c", "d", "e", "z"]


def test_the_example_keeps_to_names_of_its_own():
    names = {q.name for q in bulk_mail.app.topology().queues}
    assert all(n.startswith("example-bulk-mail") for n in names)
    assert bulk_mail.app.exchange == "examples"
