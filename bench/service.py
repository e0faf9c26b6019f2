"""The benchmark service for ``rabbitq worker bench.service:app --processes N``.

Its queue is ``$BENCH_QUEUE``. Each worker process keeps, in ``$BENCH_OUT/<pid>``, one
record ``first last count`` (monotonic seconds, messages handled), rewritten in place
on every message, so the harness can add up the counts of all processes and compute
the rate from the earliest first to the latest last, without a per-message line.
"""

from __future__ import annotations

import os
import time

from rabbitq import App

from .common import BenchJob, bench_app

_state: dict[str, float] = {}
_fd: int | None = None


def _record() -> None:
    global _fd
    now = time.monotonic()
    if _fd is None:
        path = os.path.join(os.environ["BENCH_OUT"], str(os.getpid()))
        _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        _state["first"] = now
        _state["count"] = 0
    _state["count"] += 1
    line = f"{_state['first']:.6f} {now:.6f} {int(_state['count'])}".ljust(64) + "\n"
    os.pwrite(_fd, line.encode(), 0)


def build() -> App:
    app = bench_app(os.environ.get("BENCH_QUEUE", "bench.service"))

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:
        _record()

    return app


app = build()
