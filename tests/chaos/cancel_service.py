"""The service of the cancel-with-kill scenario, run as ``rabbitq worker
tests.chaos.cancel_service:app``: a cancellable app over the real Redis whose handler
appends each message id it begins to a ledger (one ``os.write`` to an ``O_APPEND`` file:
a line survives ``kill -9``). Configured by ``CANCEL_QUEUE``, ``CANCEL_LEDGER`` and
``CANCEL_PREFIX`` (the Redis key prefix)."""

from __future__ import annotations

import asyncio
import os

from rabbitq import App, Context, Message
from rabbitq.backends import RedisBackend

REDIS = os.environ.get("RABBITQ_TEST_REDIS", "redis://127.0.0.1:6379/0")


class Capture(Message, type="chaos.cancel.capture"):
    n: int


def build_app(queue: str, ledger: str, prefix: str, url: str | None = None) -> App:
    # Classic: the delay ladder's levels are shared by the vhost, and the shared broker's
    # quorum levels may hold messages for another suite's dead-letter timer.
    app = App(
        queue=queue, exchange=f"{queue}.x", url=url, queue_type="classic", prefetch=32,
        backend=RedisBackend(REDIS, key_prefix=prefix), cancellable=True,
    )  # fmt: skip
    fd: list[int] = []

    @app.handler(Capture)
    async def capture(msg: Capture, ctx: Context) -> None:
        if not fd:
            fd.append(os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        os.write(fd[0], f"{ctx.message_id} {msg.n}\n".encode())
        await asyncio.sleep(0.02)  # a few handlers in flight when the worker is killed

    return app


app = build_app(
    os.environ.get("CANCEL_QUEUE", "chaos.cancel"),
    os.environ.get("CANCEL_LEDGER", os.devnull),
    os.environ.get("CANCEL_PREFIX", "rabbitq-chaos-cancel:"),
)
