"""A bulk mail service: sends ``mail.bulk`` messages through a provider's batch API, up
to 100 per call (docs/batches.md).

Run a worker from the repository root (it declares ``example-bulk-mail``, its retry
queues and ``example-bulk-mail.dlq``, bound to the ``examples`` exchange)::

    rabbitq worker examples.bulk_mail:app

and, in another shell, publish 250 sample mails (three provider calls: 100, 100, 50;
the bounced addresses go to the DLQ at once, the throttled ones are retried alone)::

    python -m examples.bulk_mail

The handler gets up to ``max_size=100`` messages, at most ``max_wait=0.2`` s after the
first of them arrived, and makes one provider call. The provider answers per mail: a
bounce is dead-lettered (``BatchResult.dead_letter``), a throttled mail retried on its
own attempt count (``BatchResult.retry``), the rest are acked. A provider that fails as
a whole (raises) retries every mail of the batch. With ``idempotency=`` a mail whose
``message_id`` was sent before, or that appears twice in one batch, is acked as a
duplicate before the call; the ids go to the provider as its idempotency keys too.

The default provider is a :class:`SandboxProvider`, which sends nothing and keeps each
call in memory. Plug in a real one with :func:`create_app`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import Annotated, Literal, Protocol

from pydantic import StringConstraints

from rabbitq import App, BatchContext, BatchResult, Message, RabbitqError, RetryPolicy

log = logging.getLogger("examples.bulk_mail")

EXCHANGE = os.environ.get("EXAMPLES_EXCHANGE", "examples")
MAX_PER_CALL = 100  # the provider's limit per API call
SIMULATOR_DOMAIN = "simulator.example"

Answer = Literal["sent", "throttled", "bounced"]


class BulkMail(Message, type="mail.bulk"):
    """One mail of a newsletter or a notification run."""

    to: Annotated[str, StringConstraints(min_length=3, max_length=254, pattern=r"^[^@\s]+@\S+$")]
    subject: Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\r\n]*$")]
    body: Annotated[str, StringConstraints(max_length=100_000)]


class Provider(Protocol):
    """A mail provider's batch API: one answer per mail, in order."""

    async def send_many(self, mails: Sequence[BulkMail], keys: Sequence[str]) -> list[Answer]: ...


class SandboxProvider:
    """Sends nothing; ``bounce@simulator.example`` bounces, ``throttle@simulator.example``
    is throttled every time. ``calls`` holds the size of each call."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.sent: dict[str, BulkMail] = {}

    async def send_many(self, mails: Sequence[BulkMail], keys: Sequence[str]) -> list[Answer]:
        if len(mails) > MAX_PER_CALL:
            raise ValueError(f"at most {MAX_PER_CALL} mails per call")
        self.calls.append(len(mails))
        answers: list[Answer] = []
        for mail, key in zip(mails, keys, strict=True):
            if mail.to == f"bounce@{SIMULATOR_DOMAIN}":
                answers.append("bounced")
            elif mail.to == f"throttle@{SIMULATOR_DOMAIN}":
                answers.append("throttled")
            else:
                self.sent[key] = mail
                answers.append("sent")
        return answers


def create_app(
    *,
    provider: Provider | None = None,
    url: str | None = None,
    exchange: str = EXCHANGE,
    queue: str = "example-bulk-mail",
    retry: RetryPolicy | None = None,
    idempotency: object | None = None,
) -> App:
    """The bulk mail app; ``idempotency`` is a ``rabbitq.effects`` store (or None)."""
    provider = provider or SandboxProvider()
    app = App(
        queue=queue,
        exchange=exchange,
        url=url,
        prefetch=2 * MAX_PER_CALL,  # one batch fills while the last one is being sent
        retry=retry or RetryPolicy(delays=(5, 30, 300)),
        timeout=60,  # per provider call
        idempotency=idempotency,  # type: ignore[arg-type]
    )

    @app.batch_handler(BulkMail, max_size=MAX_PER_CALL, max_wait=0.2)
    async def send(mails: list[BulkMail], ctx: BatchContext) -> BatchResult:
        answers = await provider.send_many(mails, ctx.keys)
        result = BatchResult()
        for i, answer in enumerate(answers):
            if answer == "bounced":
                result.dead_letter(i, "hard bounce")
            elif answer == "throttled":
                result.retry(i, "throttled by the provider")
        log.info("sent %d of %d mails in one call", answers.count("sent"), len(mails))
        return result

    return app


app = create_app()


def samples(n: int = 250) -> list[BulkMail]:
    """``n`` sample mails; of the first 250, two bounce (7 and 150) and one (42) is
    throttled every time."""
    special = {7: "bounce", 42: "throttle", 150: "bounce"}
    return [
        BulkMail(
            to=f"{special[i]}@{SIMULATOR_DOMAIN}" if i in special else f"reader{i}@example.com",
            subject="News",
            body="...",
        )
        for i in range(n)
    ]


async def publish_samples(target: App = app, n: int = 250) -> list[str]:
    """Publish the sample mails with confirms; return their message ids."""
    async with target.publisher() as pub:
        return await pub.publish_many(samples(n))


def main() -> int:
    try:
        ids = asyncio.run(publish_samples())
    except RabbitqError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(f"published {len(ids)} mails to {app.exchange!r}", file=sys.stderr)
    print("run a worker to send them: rabbitq worker examples.bulk_mail:app", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
