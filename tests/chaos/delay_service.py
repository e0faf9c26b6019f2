"""The service of the delay scenario, run as ``rabbitq worker tests.chaos.delay_service:app``.

Its one handler records every delivery it gets in a file (one ``os.write`` per line, to
a file opened ``O_APPEND``: a line survives ``kill -9``): when the handler began, the
process, the message id, the ``rabbitq-due`` header the publisher wrote, and whether the
broker flagged the delivery as redelivered (returned by a dead worker or a restart,
which is not a new arrival from the ladder). Configured by ``DELAY_QUEUE`` and
``DELAY_LEDGER``.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rabbitq import App, Context, Message
from rabbitq.ladder.plan import DUE


class Reminder(Message, type="chaos.delay.reminder"):
    n: int


@dataclass(frozen=True)
class Arrival:
    """One line of the ledger."""

    started: float
    pid: int
    message_id: str
    due: float
    redelivered: bool


def build_app(queue: str, ledger: str, url: str | None = None) -> App:
    app = App(queue=queue, exchange=f"{queue}.x", url=url, queue_type="quorum", prefetch=64)
    fd: list[int] = []

    @app.handler(Reminder)
    async def remind(msg: Reminder, ctx: Context) -> None:
        started = time.time()
        if not fd:
            fd.append(os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        line = f"{started:.6f} {os.getpid()} {ctx.message_id} {ctx.headers[DUE]} "
        os.write(fd[0], f"{line}{int(ctx.redelivered)}\n".encode())
        await asyncio.sleep(0.01)  # a few handlers in flight when the worker is killed

    return app


def arrivals(path: Path) -> list[Arrival]:
    """Every line of the ledger so far."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        started, pid, mid, due, redelivered = line.split(" ")
        out.append(
            Arrival(
                float(started), int(pid), mid, datetime.fromisoformat(due).timestamp(),
                redelivered == "1",
            )
        )  # fmt: skip
    return out


app = build_app(
    os.environ.get("DELAY_QUEUE", "chaos.delay"), os.environ.get("DELAY_LEDGER", os.devnull)
)
