"""The chaos scenarios, shared by the tests (small counts) and ``scripts/reliability.py``
(the figures in ``docs/reliability.md``). Each runs against the broker at ``url``
(a private node for anything that restarts the broker or cuts every connection), is
bounded in messages and seconds, and returns a :class:`Result` with its tally.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from .harness import ChaosRun
from .ledger import Tally
from .service import Config


@dataclass
class Result:
    """One row of the reliability table."""

    scenario: str
    queue_type: str
    messages: int
    faults: str
    tally: Tally
    recover_s: list[float] = field(default_factory=list)
    """For each fault, seconds from the fault (or its end) until handling resumed."""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def worst_recovery(self) -> float | None:
        return max(self.recover_s, default=None)


# Handlers that fail now and then, over three short tiers: retry copies and dead letters
# are written all the time while the faults hit.
FLAKY = Config(fail_rate=0.2, permanent_rate=0.02, handle_seconds=0.02, delays="0.2,0.5,1")


async def kill_workers(
    url: str, workdir: Path, *, messages: int = 1500, kills: int = 4, queue_type: str = "classic"
) -> Result:
    """Two worker processes under a backlog; one of them is killed with SIGKILL every
    0.5-1 s and replaced at once."""
    started = time.monotonic()
    config = replace(FLAKY, queue_type=queue_type, prefetch=10, handle_seconds=0.05)
    async with ChaosRun(url, workdir, config) as run:
        run.spawn()
        run.spawn()
        await run.publish(messages)
        recover: list[float] = []
        done = 0
        for _ in range(kills):
            await asyncio.sleep(random.uniform(0.5, 1.0))
            if run.progress() > 0.95:
                break  # kill only under load
            victim = random.choice(run.live_workers())
            moment = await asyncio.to_thread(victim.kill)
            replacement = run.spawn()
            done += 1
            recover.append(await _resumed(run, moment, replacement.pid))
        tally = await run.finish()
    return Result(
        "worker killed with SIGKILL under load",
        queue_type,
        messages,
        f"{done} x kill -9 (of 2 workers)",
        tally,
        recover,
        time.monotonic() - started,
    )


async def _resumed(run: ChaosRun, moment: float, pid: int | None = None, limit: float = 60) -> float:
    """Seconds from ``moment`` until a handler (of ``pid``) began, polling the ledger."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        first = run.ledger.first_after(moment, pid)
        if first is not None:
            return first - moment
        await asyncio.sleep(0.05)
    return float("nan")
