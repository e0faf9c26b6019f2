"""A reminder email at a given time: published now with ``at=``, held by the broker's
delay ladder (no timer in any process), sent when it is due (docs/delays.md).

Run a worker from the repository root (it declares the ``example-reminders`` queue and the
delay ladder it shares with every app on the vhost)::

    rabbitq worker examples.reminder_email:app

and, in another shell, book a reminder ten seconds from now::

    python -m examples.reminder_email

or one for a given time, with its offset (a time without one is refused)::

    rabbitq publish examples.reminder_email:app reminder.email \\
        '{"to": "ada@example.com", "subject": "Your call", "body": "at 10:00"}' \\
        --at 2026-12-01T09:45:00+01:00

The worker may be stopped, killed or redeployed meanwhile, and the broker restarted:
the reminder waits in the broker's queues and comes to ``example-reminders`` when due, never
before. It may come twice (at-least-once); the message id is the sender's idempotency
key, so the email goes out once. The default :class:`SandboxSender` sends nothing and
keeps each email in memory.
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import UTC, datetime, timedelta
from typing import Protocol

from rabbitq import App, Context, Message, RetryPolicy
from rabbitq.ladder import due_in

log = logging.getLogger("examples.reminder_email")


class ReminderEmail(Message, type="reminder.email"):
    to: str
    subject: str
    body: str


class Sender(Protocol):
    async def send(self, email: ReminderEmail, *, idempotency_key: str) -> None: ...


class SandboxSender:
    """Sends nothing: keeps each email by idempotency key, and when it was sent."""

    def __init__(self) -> None:
        self.sent: dict[str, tuple[ReminderEmail, datetime]] = {}

    async def send(self, email: ReminderEmail, *, idempotency_key: str) -> None:
        self.sent.setdefault(idempotency_key, (email, datetime.now(UTC)))


def create_app(
    *,
    queue: str = "example-reminders",
    exchange: str = os.environ.get("EXAMPLES_EXCHANGE", "examples"),
    url: str | None = None,
    sender: Sender | None = None,
) -> App:
    """The reminder service. Tests pass their own names and sender; the module's ``app``
    uses the defaults."""
    app = App(queue=queue, exchange=exchange, url=url, retry=RetryPolicy(delays=(10, 60, 600)))
    outbox = sender or SandboxSender()

    @app.handler(ReminderEmail, timeout=30)
    async def send_reminder(email: ReminderEmail, ctx: Context) -> None:
        await outbox.send(email, idempotency_key=ctx.idempotency_key)
        log.info("reminder %s to %s sent", ctx.message_id, email.to)

    return app


app = create_app()


async def remind(
    app: App, email: ReminderEmail, at: datetime, *, message_id: str | None = None
) -> str:
    """Book ``email`` for ``at`` (a timezone-aware datetime); return its message id.

    A naive ``at`` raises :class:`~rabbitq.DelayError` before anything is sent, here
    even before connecting.
    """
    due_in(at=at)
    async with app.publisher() as pub:
        return await pub.publish(email, at=at, message_id=message_id)


async def main() -> None:
    at = datetime.now(UTC) + timedelta(seconds=10)
    email = ReminderEmail(to="ada@example.com", subject="Your call", body="in ten seconds")
    mid = await remind(app, email, at)
    print(f"reminder {mid} booked for {at.isoformat(timespec='seconds')}")


if __name__ == "__main__":
    asyncio.run(main())
