"""The reminder example (examples/reminder_email.py), tested as its users would: with
rabbitq.testing, no broker. Its live test is tests/integration/test_reminder_example_live.py."""

from __future__ import annotations

from datetime import datetime

import pytest

from examples import reminder_email
from examples.reminder_email import ReminderEmail, SandboxSender
from rabbitq import DelayError
from rabbitq.testing import deliver


def reminder() -> ReminderEmail:
    return ReminderEmail(to="ada@example.com", subject="Your call", body="at 10:00")


async def test_a_due_reminder_is_sent_once_keyed_by_its_message_id():
    sender = SandboxSender()
    app = reminder_email.create_app(sender=sender)
    first = await deliver(app, reminder(), message_id="r-1")
    again = await deliver(app, reminder(), message_id="r-1", redelivered=True)

    assert first.acked and again.acked
    assert list(sender.sent) == ["r-1"]


async def test_booking_a_reminder_for_a_time_without_an_offset_is_refused_before_connecting():
    app = reminder_email.create_app(url="amqp://guest:guest@127.0.0.1:1/")  # never reached
    with pytest.raises(DelayError, match="naive datetime"):
        await reminder_email.remind(app, reminder(), datetime(2026, 12, 1, 9, 45))
