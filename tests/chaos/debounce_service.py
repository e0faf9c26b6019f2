"""The service of the debounce kill test, run as
``rabbitq worker tests.chaos.debounce_service:app``.

An app with ``debounce=True`` on the backend ``DEBOUNCE_STORE`` names (``postgres`` or
``redis``, with ``DEBOUNCE_PREFIX``). Its handler writes a ``start`` line to the ledger
(``DEBOUNCE_LEDGER``: one ``os.write`` per line, ``O_APPEND``, so a line survives
``kill -9``), sleeps ``DEBOUNCE_SLOW`` seconds (room for a kill mid-run), then with
PostgreSQL writes its effect row in ``ctx.transaction()`` (``<prefix>digests``: once
per message id with the app's idempotency store) and a ``done`` line. A killed run's
claim in the store lapses (its heartbeat stops) and the redelivery takes it over.
"""

from __future__ import annotations

import asyncio
import os

from rabbitq import App, Context, Message
from rabbitq.backends import Backend, PostgresBackend, RedisBackend

PG_URL = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("RABBITQ_TEST_REDIS", "redis://127.0.0.1:6379/0")


class Digest(Message, type="chaos.debounce.digest"):
    user: int
    n: int


def backend(kind: str, prefix: str) -> Backend:
    if kind == "postgres":
        return PostgresBackend(PG_URL, prefix=prefix)
    return RedisBackend(REDIS_URL, key_prefix=prefix)


def build_app(queue: str, url: str | None, kind: str, prefix: str, ledger: str, slow: float) -> App:
    app = App(
        queue=queue, exchange=f"{queue}.x", url=url, prefetch=2, timeout=5.0,
        backend=backend(kind, prefix), debounce=True,
    )  # fmt: skip
    fd: list[int] = []

    def line(what: str, msg: Digest, ctx: Context) -> None:
        if not fd:
            fd.append(os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        text = f"{what} {os.getpid()} {ctx.message_id} {msg.user} {msg.n}\n"
        os.write(fd[0], text.encode())

    @app.handler(Digest)
    async def digest(msg: Digest, ctx: Context) -> None:
        line("start", msg, ctx)
        await asyncio.sleep(slow)
        if kind == "postgres":
            async with ctx.transaction() as conn:
                await conn.execute(
                    f"INSERT INTO {prefix}digests (user_id, n, message_id) VALUES (%s, %s, %s)",
                    (msg.user, msg.n, ctx.message_id),
                )
        line("done", msg, ctx)

    return app


app = build_app(
    os.environ.get("DEBOUNCE_QUEUE", "chaos.debounce"),
    os.environ.get("DEBOUNCE_URL"),
    os.environ.get("DEBOUNCE_STORE", "redis"),
    os.environ.get("DEBOUNCE_PREFIX", "rabbitq-chaos:"),
    os.environ.get("DEBOUNCE_LEDGER", os.devnull),
    float(os.environ.get("DEBOUNCE_SLOW", "0.5")),
)
