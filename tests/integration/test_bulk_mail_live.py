"""The bulk mail example against a real RabbitMQ: the samples published through the
broker before a worker runs go out in provider calls of 100."""

from __future__ import annotations

import pytest

from examples import bulk_mail
from examples.bulk_mail import SandboxProvider
from rabbitq import RetryPolicy, Worker

from ..helpers import Recorder, declare_topology, drain_queue, running, wait_for

pytestmark = pytest.mark.broker


async def test_the_samples_are_sent_100_per_call_and_bounces_dead_lettered(make_app, connection):
    provider = SandboxProvider()
    app = make_app(create=bulk_mail.create_app, provider=provider, retry=RetryPolicy(delays=(0.2,)))
    await declare_topology(connection, app)
    await bulk_mail.publish_samples(app)
    rec = Recorder()
    async with running(Worker(app, hooks=rec)):
        # two bounces at once, the throttled mail after its two attempts
        await wait_for(lambda: rec.count("dead_lettered") == 3)
        await wait_for(lambda: rec.count("succeeded") == 247)
    # 250 mails and the throttled one's second attempt (which may join the third batch)
    assert provider.calls[:2] == [100, 100] and sum(provider.calls) == 251
    assert max(provider.calls) == 100
    dead = await drain_queue(connection, app.topology().dlq.name)
    assert sorted(str(m.headers["rabbitq-reason"]) for m in dead) == [
        "exhausted", "permanent", "permanent",
    ]  # fmt: skip
