"""The service that chaos scenarios run, in-process or as
``rabbitq worker tests.chaos.service:app`` in a subprocess.

A subprocess worker is configured by environment variables that :meth:`Config.env`
writes and :meth:`Config.from_env` reads (``CHAOS_QUEUE``, ``CHAOS_FAIL_RATE``, ...).
The handler records every message it handled in the scenario's :class:`Ledger`, with
the time the handler started, so that the test can tell when consumption resumed.

A :class:`Job` with ``crash=True`` kills the worker process (``os._exit(1)``) every
time it is handled: the poison message of the crash-loop scenario. One with
``fail_times=k`` fails its first ``k`` attempts, for faults aimed at the retry path.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from rabbitq import App, Context, Message, PermanentError, RetryPolicy

from .ledger import Ledger


class Job(Message, type="chaos.job"):
    n: int
    crash: bool = False
    fail_times: int = 0


@dataclass(frozen=True, kw_only=True)
class Config:
    """One scenario's service: names, queue type, tiers and how often handlers fail."""

    queue: str = "chaos"
    exchange: str = "chaos"
    queue_type: str = "quorum"
    delivery_limit: int = 10
    delays: str = "0.2,0.5,1"
    """Retry tiers in seconds, comma-separated."""
    fail_rate: float = 0.0
    """Chance that an attempt raises (it is then retried, or dead-lettered as exhausted)."""
    permanent_rate: float = 0.0
    """Chance that an attempt raises PermanentError (dead-lettered at once)."""
    handle_seconds: float = 0.0
    """Mean time a handler works (uniform in 0 .. 2x)."""
    ledger: str = os.devnull
    prefetch: int = 32

    def env(self) -> dict[str, str]:
        """The environment variables that configure a subprocess worker."""
        return {f"CHAOS_{k.upper()}": str(v) for k, v in asdict(self).items()}

    @classmethod
    def from_env(cls) -> Config:
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = os.environ.get(f"CHAOS_{f.name.upper()}")
            if raw is not None:
                kind = type(getattr(cls(), f.name))
                values[f.name] = kind(raw)
        return cls(**values)  # type: ignore[arg-type]


def build_app(
    config: Config, *, url: str | None = None, gate: Callable[[], Awaitable[Any]] | None = None
) -> App:
    """The chaos service's App; ``gate`` is awaited by every handler before it decides."""
    app = App(
        queue=config.queue,
        exchange=config.exchange,
        url=url,
        queue_type=config.queue_type,  # type: ignore[arg-type]
        delivery_limit=config.delivery_limit,
        prefetch=config.prefetch,
        retry=RetryPolicy(delays=tuple(float(d) for d in config.delays.split(","))),
    )
    ledger = Ledger(config.ledger)

    @app.handler(Job)
    async def job(msg: Job, ctx: Context) -> None:
        started = time.time()
        if msg.crash:
            os._exit(1)  # the whole process dies mid-handler, every time
        if config.handle_seconds:
            await asyncio.sleep(random.uniform(0, 2 * config.handle_seconds))
        if gate is not None:
            await gate()
        if ctx.attempt <= msg.fail_times:
            raise RuntimeError(f"chaos: planned failure of attempt {ctx.attempt}")
        roll = random.random()
        if roll < config.fail_rate:
            raise RuntimeError(f"chaos: random failure of attempt {ctx.attempt}")
        if roll < config.fail_rate + config.permanent_rate:
            raise PermanentError("chaos: random permanent failure")
        ledger.record(ctx.message_id, started)

    return app


# What ``rabbitq worker tests.chaos.service:app`` runs (configured by CHAOS_* variables).
app = build_app(Config.from_env())
