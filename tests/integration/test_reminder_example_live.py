"""The reminder example against a real RabbitMQ: booked for a time, sent at that time,
not before, by a worker in-process."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from examples import reminder_email
from examples.reminder_email import ReminderEmail, SandboxSender
from rabbitq import App, Worker
from tests.helpers import declare_topology, running, wait_for

pytestmark = pytest.mark.broker


async def test_a_reminder_booked_for_a_time_is_sent_then_and_not_before(
    make_app: Callable[..., App], connection
):
    sender = SandboxSender()
    app = make_app(create=reminder_email.create_app, sender=sender)
    await declare_topology(connection, app)
    at = datetime.now(UTC) + timedelta(seconds=1.5)
    email = ReminderEmail(to="ada@example.com", subject="Your call", body="at 10:00")
    mid = await reminder_email.remind(app, email, at)

    async with running(Worker(app)):
        await wait_for(lambda: mid in sender.sent, timeout=15)
    sent, when = sender.sent[mid]
    assert sent == email and when >= at
