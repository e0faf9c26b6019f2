"""The service of the ordering proof (:mod:`tests.chaos.ordering_proof`), run as
``rabbitq worker tests.chaos.ordering_service:app --processes 3``; configured by
``ORDER_*`` variables. The handler appends ``<pid> <key> <seq> <attempt>`` to the
proof's record file (one ``os.write`` on an ``O_APPEND`` file: the kernel orders the
lines of every process, and a record survives ``kill -9`` the instant after)."""

from __future__ import annotations

import asyncio
import os
import random

from rabbitq import App, Context, Message, RetryPolicy


class Entry(Message, type="order.entry"):
    key: str
    seq: int
    fail_first: bool = False


def fails_first(key: int, seq: int, share: float = 0.2) -> bool:
    """Whether message ``seq`` of key ``key`` fails its first attempt: a fixed 20%."""
    return random.Random(key * 1_000_003 + seq).random() < share


def build_app() -> App:
    env = os.environ
    app = App(
        queue=env.get("ORDER_QUEUE", "order-proof"),
        exchange=env.get("ORDER_EXCHANGE", "order-proof"),
        url=env.get("ORDER_URL") or None,
        partitions=int(env.get("ORDER_PARTITIONS", "6")),
        prefetch=int(env.get("ORDER_PREFETCH", "32")),
        retry=RetryPolicy(delays=(0.2, 0.5, 1.0)),
    )
    record = env.get("ORDER_RECORD", os.devnull)
    work = float(env.get("ORDER_WORK", "0.002"))
    fd: list[int] = []

    @app.handler(Entry, ordered_by=lambda m: m.key, timeout=30)
    async def entry(msg: Entry, ctx: Context) -> None:
        await asyncio.sleep(random.uniform(0, 2 * work))
        if msg.fail_first and ctx.attempt == 1:
            raise RuntimeError(f"planned failure of {msg.key}#{msg.seq}")
        if not fd:
            fd.append(os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        os.write(fd[0], f"{os.getpid()} {msg.key} {msg.seq} {ctx.attempt}\n".encode())

    return app


app = build_app()
