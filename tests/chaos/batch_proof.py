"""The batch proof, counted: N messages through a batch handler with partial failures
(tests/chaos/batch_service.py), two worker processes, workers killed with ``kill -9``
while batches run; every message must end handled or dead-lettered, once, by count.

    python -m tests.chaos.batch_proof --messages 10000 [--kills 2] [--url URL]

The suite runs a reduced size (tests/chaos/test_batch_proof.py). Counted:

- ``lost``: messages neither in the ledger (handled) nor in the DLQ;
- ``both``: messages handled and dead-lettered;
- ``dead_twice``: DLQ copies past one per message (the same message_id): a kill after a
  dead letter's copy was confirmed and before its ack makes a second copy, as it does
  for a single handler (copies are at-least-once; bounded by the batches in flight);
- ``repeated``: ledger lines past one per message: effects run again because a kill
  came between the batch's effect and its done marks (bounded by the batches in flight);
- ``duplicates``: redelivered messages the store removed before a batch (acked, not run);
- the sizes of the batches handed over, as a histogram, and what handed them over.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aio_pika
import redis.asyncio as aioredis

from rabbitq import App
from rabbitq._ops.batch_series import BATCH_SIZE_BUCKETS

from ..helpers import (
    declare_topology,
    delete_app_objects,
    drain_queue,
    queue_depth,
    unexpected_exits,
)
from . import batch_service as service

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Count:
    messages: int
    kills: int = 0
    handled: int = 0
    dead: int = 0
    lost: int = 0
    both: int = 0
    dead_twice: int = 0
    repeated: int = 0
    duplicates: int = 0
    left: int = 0  # messages still in the queue at the end (0 when all settled)
    reasons: Counter[str] = field(default_factory=Counter)
    sizes: list[int] = field(default_factory=list)
    triggers: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def histogram(self) -> str:
        """Cumulative, as Prometheus's ``rabbitq_batch_size`` buckets read."""
        parts = [f"le={b}: {sum(1 for s in self.sizes if s <= b)}" for b in BATCH_SIZE_BUCKETS]
        return ", ".join(parts) + f", +Inf: {len(self.sizes)}"

    def in_full_batches(self) -> float:
        """The share of deliveries handed over in batches of ``max_size``."""
        total = sum(self.sizes)
        return sum(s for s in self.sizes if s == service.MAX_SIZE) / total if total else 0.0

    def lines(self) -> str:
        return "\n".join(
            [
                f"batch proof: {self.messages} messages, {self.kills} kill -9, "
                f"{self.seconds:.1f} s",
                f"  handled {self.handled} + dead-lettered {self.dead} = "
                f"{self.handled + self.dead}; lost {self.lost}, left in the queue {self.left}, "
                f"handled and dead-lettered "
                f"{self.both}",
                f"  DLQ reasons {dict(self.reasons)}",
                f"  duplicates removed by the store {self.duplicates}; effects repeated "
                f"(a kill between a batch's effect and its done marks) {self.repeated}; "
                f"DLQ copies past one (a kill between a copy's confirm and its ack) "
                f"{self.dead_twice}",
                f"  batches {len(self.sizes)} ({dict(self.triggers)}); deliveries in full "
                f"batches of {service.MAX_SIZE}: {self.in_full_batches():.1%}",
                f"  rabbitq_batch_size: {self.histogram()}",
            ]
        )


class Run:
    """The names, files and worker processes of one proof run."""

    def __init__(self, url: str, workdir: Path) -> None:
        uid = uuid.uuid4().hex[:10]
        self.url = url
        self.queue, self.exchange = f"t.{uid}.batchproof", f"t.{uid}.batchproof.x"
        self.prefix = f"rabbitq-test:{uid}:"
        self.ledger, self.events = workdir / "ledger", workdir / "events"
        self.log = workdir / "workers.log"
        self.workers: list[subprocess.Popen[bytes]] = []
        self.app = service.build_app(url, self.queue, self.exchange, self.prefix, os.devnull)

    def spawn(self) -> subprocess.Popen[bytes]:
        args = ["--url", self.url, "--queue", self.queue, "--exchange", self.exchange,
                "--prefix", self.prefix, "--ledger", str(self.ledger),
                "--events", str(self.events)]  # fmt: skip
        with self.log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.batch_service", *args],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.workers.append(proc)
        return proc

    def check(self) -> None:
        """Fail, with its last lines, if a worker died that the proof did not kill."""
        died = unexpected_exits((p, self.log) for p in self.workers)
        assert not died, died

    def handled(self) -> set[int]:
        if not self.ledger.exists():
            return set()
        return {int(line.split()[0]) for line in self.ledger.read_text().splitlines() if line}


async def _dead_count(conn: aio_pika.abc.AbstractRobustConnection, app: App) -> int:
    return await queue_depth(conn, app.topology().dlq.name)


async def prove(url: str, messages: int, kills: int, workdir: Path, limit: float = 600) -> Count:
    """Run the scenario once and count (see the module docstring)."""
    run = Run(url, workdir)
    count = Count(messages=messages)
    conn = await aio_pika.connect_robust(url)
    started = time.monotonic()
    try:
        await declare_topology(conn, run.app)
        run.spawn()
        run.spawn()
        async with run.app.publisher() as pub:
            await pub.publish_many([service.Item(seq=i) for i in range(messages)])
        # a kill each time another share of the messages is handled, while batches run
        for k in range(kills):
            goal = messages * (k + 1) // (kills + 2)
            while len(run.handled()) < goal:
                run.check()
                await asyncio.sleep(0.05)
            victim = next(p for p in reversed(run.workers) if p.poll() is None)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            count.kills += 1
            run.spawn()
        deadline = time.monotonic() + limit
        while len(run.handled()) + await _dead_count(conn, run.app) < messages:
            run.check()
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(1)  # anything still to come (a duplicate, a second copy)
        for proc in run.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in run.workers:
            proc.wait(timeout=60)
        count.seconds = time.monotonic() - started
        dead = await drain_queue(conn, run.app.topology().dlq.name)
        left = await queue_depth(conn, run.queue)
    finally:
        for proc in run.workers:
            if proc.poll() is None:
                proc.kill()
        await delete_app_objects(conn, run.app)
        await conn.close()
        client = aioredis.Redis.from_url(service.REDIS)
        keys = [k async for k in client.scan_iter(match=run.prefix + "*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    seqs = [int(line.split()[0]) for line in run.ledger.read_text().splitlines() if line]
    handled = set(seqs)
    dead_seqs = [service.Item.model_validate_json(m.body).seq for m in dead]
    count.reasons = Counter(str(m.headers.get("rabbitq-reason")) for m in dead)
    count.handled, count.dead = len(handled), len(set(dead_seqs))
    count.lost = messages - len(handled | set(dead_seqs))
    count.left = left
    count.both = len(handled & set(dead_seqs))
    count.dead_twice = len(dead_seqs) - len(set(dead_seqs))
    count.repeated = len(seqs) - len(handled)
    for line in run.events.read_text().splitlines():
        kind, *rest = line.split()
        if kind == "D":
            count.duplicates += 1
        elif kind == "F":
            count.sizes.append(int(rest[0]))
            count.triggers[rest[1]] += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--kills", type=int, default=2)
    default_url = os.environ.get("RABBITQ_TEST_URL", "amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--url", default=default_url)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        count = asyncio.run(prove(args.url, args.messages, args.kills, Path(tmp)))
    print(count.lines())
    ok = count.lost == 0 and count.both == 0 and count.left == 0
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
