"""An email service: consumes ``email.send`` messages and sends them through a provider.

Run a worker from the repository root (it declares the ``example-emails`` queue, its
retry queues and ``example-emails.dlq``, bound to the ``examples`` exchange: the
examples keep to names of their own, apart from the README's tutorial)::

    rabbitq worker examples.email_service:app

and, in another shell, publish some sample emails (one is delivered, one hard-bounces
and goes to ``example-emails.dlq`` at once, one keeps failing and is retried in 5s, 30s, 5m and
30m before it is dead-lettered as ``exhausted``)::

    python -m examples.email_service

or one email by hand, validated against :class:`SendEmail` before it is sent::

    rabbitq publish examples.email_service:app email.send \\
        '{"to": "ada@example.com", "subject": "Welcome", "body": "Hello Ada"}'

The default sender is a :class:`SandboxSender`, which sends nothing: it keeps each
email in memory, and the handler logs it. Plug in a real provider by passing any object with the
:class:`EmailSender` method to :func:`create_app`. A provider error that retrying can
fix (rate limit, SMTP 4xx, timeout) should be raised as :class:`DeliveryDeferred` (any
exception other than a ``PermanentError`` is retried); one it cannot fix (the mailbox
does not exist) as :class:`HardBounce`, a :class:`~rabbitq.PermanentError`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from typing import Annotated, Protocol

from pydantic import AfterValidator, StringConstraints

from rabbitq import App, Context, Message, PermanentError, PublishError, RabbitqError, RetryPolicy

log = logging.getLogger("examples.email_service")

# The examples' own exchange, apart from the tutorial's (and any app's) "rabbitq";
# the tests run the module-level apps on an exchange of their own through it.
EXCHANGE = os.environ.get("EXAMPLES_EXCHANGE", "examples")

# Deliberately simple: one "@", no whitespace, a dot in the domain. Real validation is
# the provider's job (and pydantic's EmailStr needs the email-validator package).
_ADDRESS = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s.]+$")
_MAX_ADDRESS = 254  # RFC 5321 path limit


def _email_address(value: str) -> str:
    value = value.strip()
    if len(value) > _MAX_ADDRESS or not _ADDRESS.match(value):
        raise ValueError("not an email address (expected name@domain.tld)")
    local, _, domain = value.rpartition("@")
    return f"{local}@{domain.lower()}"  # domains are case-insensitive, local parts not


EmailAddress = Annotated[str, AfterValidator(_email_address)]
# A subject becomes a mail header: a line break in it would let input inject headers.
Subject = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\r\n]*$")]


class SendEmail(Message, type="email.send"):
    """Send one plain-text email."""

    to: EmailAddress
    subject: Subject
    body: Annotated[str, StringConstraints(max_length=100_000)]


class DeliveryDeferred(Exception):
    """The provider cannot take the email now (rate limit, SMTP 4xx, timeout): retried."""


class HardBounce(PermanentError):
    """The address does not exist or refuses mail: dead-lettered, retrying cannot help."""


class EmailSender(Protocol):
    """What the service needs from an email provider."""

    async def send(self, email: SendEmail, *, idempotency_key: str) -> str:
        """Send ``email`` and return the provider's id for it.

        Called again with the same ``idempotency_key`` (a redelivery, a retry after a
        timeout whose request did reach the provider), it must not send a second email.
        Providers that take an ``Idempotency-Key`` request header do exactly this.
        """
        ...


SIMULATOR_DOMAIN = "simulator.example"


class SandboxSender:
    """Sends nothing: keeps each email in :attr:`outbox` (for development).

    Like a provider's mailbox simulator, two addresses fail on purpose:
    ``bounce@simulator.example`` hard-bounces and ``tempfail@simulator.example`` is
    deferred every time.
    """

    def __init__(self) -> None:
        self.outbox: dict[str, SendEmail] = {}  # by idempotency key

    async def send(self, email: SendEmail, *, idempotency_key: str) -> str:
        if email.to == f"bounce@{SIMULATOR_DOMAIN}":
            raise HardBounce(f"550 5.1.1 <{email.to}>: mailbox does not exist")
        if email.to == f"tempfail@{SIMULATOR_DOMAIN}":
            raise DeliveryDeferred(f"421 4.7.0 <{email.to}>: try again later")
        provider_id = f"sandbox-{idempotency_key}"
        if idempotency_key in self.outbox:
            log.info(
                "email %s was already sent as %s; not sending it again",
                idempotency_key,
                provider_id,
            )
            return provider_id
        self.outbox[idempotency_key] = email
        return provider_id


# Provider outages last minutes, not seconds: 5 attempts over about 35 minutes.
RETRY = RetryPolicy(delays=(5, 30, 300, 1800))


def create_app(
    *,
    queue: str = "example-emails",
    exchange: str = EXCHANGE,
    url: str | None = None,
    sender: EmailSender | None = None,
    retry: RetryPolicy = RETRY,
) -> App:
    """The email service. Tests pass their own names, sender and retry delays; the
    module's ``app`` uses the defaults."""
    # Quorum queues, the default: replicated in a cluster, and a message that crashes
    # the worker every time is dead-lettered after the delivery limit.
    app = App(queue=queue, exchange=exchange, url=url, prefetch=32, retry=retry)
    provider: EmailSender = sender if sender is not None else SandboxSender()

    @app.handler(SendEmail, timeout=30)
    async def send_email(email: SendEmail, ctx: Context) -> None:
        # Always set: rabbitq derives one from the body for another producer's message
        # that has none, the same on every retry.
        key = ctx.message_id
        provider_id = await provider.send(email, idempotency_key=key)
        log.info(
            "sent %r to %s as %s (attempt %d)", email.subject, email.to, provider_id, ctx.attempt
        )

    return app


app = create_app()

SAMPLES = (
    SendEmail(to="ada@example.com", subject="Welcome to rabbitq", body="Hello Ada!"),
    SendEmail(to=f"bounce@{SIMULATOR_DOMAIN}", subject="Hard bounce", body="To the DLQ."),
    SendEmail(to=f"tempfail@{SIMULATOR_DOMAIN}", subject="Deferred", body="Retried, then DLQ."),
)


async def publish_samples(target: App = app) -> list[str]:
    """Publish :data:`SAMPLES` to ``target``'s exchange; return their message ids."""
    async with target.publisher() as pub:
        return [await pub.publish(email) for email in SAMPLES]


def main() -> int:
    """``python -m examples.email_service``: publish the sample emails."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        ids = asyncio.run(publish_samples())
    except PublishError as exc:
        print(
            f"error: {exc}\n(start the worker first: rabbitq worker examples.email_service:app)",
            file=sys.stderr,
        )
        return 1
    except RabbitqError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for email, mid in zip(SAMPLES, ids, strict=True):
        print(f"published email.send to {email.to} message_id={mid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
