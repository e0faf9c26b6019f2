"""The ordering proof, counted: keys x messages published in order (a sequence number
per key), a fixed 20% failing their first attempt, ``rabbitq worker --processes 3`` on
a partitioned app, and a worker process killed with ``kill -9`` while it works.

Counted at the end, from the handlers' own record (``tests.chaos.ordering_service``):

- **order violations**: a message handled for the first time after a later message of
  its key was handled (must be 0);
- **lost**: published (confirmed) and neither handled nor in the DLQ (must be 0);
- **duplicates**: handlings beyond the first (at-least-once: a killed worker's
  unacked messages run again), counted and reported.

The CI test runs it small (``tests/chaos/test_ordering_proof.py``); the full size::

    .venv/bin/python -m tests.chaos.ordering_proof --keys 50 --per-key 200

It uses the shared broker (``$RABBITQ_TEST_URL``, default the local one; it needs the
consistent-hash exchange plugin) with names of its own, and kills only its own worker
processes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import aio_pika
import orjson
from aio_pika.abc import AbstractRobustConnection

from tests.helpers import assert_running

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_URL = os.environ.get("RABBITQ_TEST_URL", "amqp://guest:guest@127.0.0.1:5672/")


@dataclass
class Figures:
    """What one run counted."""

    keys: int
    per_key: int
    published: int = 0
    failing_first: int = 0
    handled: int = 0  # distinct messages handled
    handlings: int = 0  # every handling, duplicates included
    violations: int = 0
    dead: int = 0
    lost: int = 0
    kills: list[int] = field(default_factory=list)  # pids killed
    seconds: float = 0.0
    pending: int = 0  # still queued when the wait ended (not lost; unfinished)
    given_back: int = 0  # stand-by partitions given back to the line (worker.partitioned)
    stop: str = "SIGKILL"

    @property
    def duplicates(self) -> int:
        return self.handlings - self.handled

    def lines(self) -> list[str]:
        return [
            f"published {self.published} ({self.keys} keys x {self.per_key}, in order), "
            f"{self.failing_first} failing their first attempt",
            f"worker processes stopped ({self.stop}): {len(self.kills)} (pids {self.kills})",
            f"handled {self.handled} distinct, {self.handlings} handlings: "
            f"duplicates {self.duplicates}",
            f"per-key order violations: {self.violations}",
            f"dead-lettered {self.dead}, lost {self.lost}, still queued {self.pending}",
            f"stand-by partitions given back (rebalance): {self.given_back}",
            f"took {self.seconds:.1f} s",
        ]


def count(lines: list[str]) -> tuple[set[tuple[str, int]], int, int]:
    """``(handled, handlings, violations)`` from the record's lines, in write order."""
    seen: set[tuple[str, int]] = set()
    highest: dict[str, int] = defaultdict(int)
    handlings = violations = 0
    for line in lines:
        _pid, key, seq_text, _attempt = line.split()
        seq = int(seq_text)
        handlings += 1
        if (key, seq) in seen:
            continue  # a duplicate: counted, not an order violation
        if seq < highest[key]:
            violations += 1
        seen.add((key, seq))
        highest[key] = max(highest[key], seq)
    return seen, handlings, violations


def _read(record: Path) -> list[str]:
    return record.read_text().splitlines() if record.exists() else []


async def run(
    *,
    keys: int,
    per_key: int,
    kills: int = 2,
    processes: int = 3,
    partitions: int = 6,
    url: str = DEFAULT_URL,
    timeout: float = 600.0,
    work: float = 0.002,
    stop: signal.Signals = signal.SIGKILL,
) -> Figures:
    """One run of the proof; returns what it counted."""
    uid = uuid.uuid4().hex[:8]
    workdir = Path(tempfile.mkdtemp(prefix="rabbitq-order-"))
    record = workdir / "record"
    env = {
        **os.environ,
        "ORDER_QUEUE": f"order.{uid}",
        "ORDER_EXCHANGE": f"order.{uid}",
        "ORDER_PARTITIONS": str(partitions),
        "ORDER_RECORD": str(record),
        "ORDER_WORK": str(work),
        "ORDER_URL": url,
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("RABBITQ_URL", None)
    os.environ.update({k: v for k, v in env.items() if k.startswith("ORDER_")})
    from . import ordering_service

    app = ordering_service.build_app()
    figures = Figures(keys=keys, per_key=per_key, stop=stop.name)
    started = time.monotonic()
    conn = await aio_pika.connect_robust(url)
    log = (workdir / "worker.log").open("ab")
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "rabbitq", "worker", "tests.chaos.ordering_service:app",
         "--processes", str(processes), "--grace-period", "5", "--log-level", "INFO"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        await _wait_declared(
            conn,
            app.topology().partitioning.mains,  # type: ignore[union-attr]
            supervisor,
            workdir / "worker.log",
        )
        total = keys * per_key
        publishing = asyncio.create_task(_publish(app, keys, per_key, figures))
        marks = [(i + 1) / (kills + 1) for i in range(kills)]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert_running(supervisor, workdir / "worker.log", "rabbitq worker --processes")
            lines = _read(record)
            done, _, _ = count(lines)
            if marks and len(done) >= marks[0] * total:
                marks.pop(0)
                pid = _active_child(lines, supervisor.pid)
                if pid is not None:
                    os.kill(pid, stop)
                    figures.kills.append(pid)
            if publishing.done() and len(done) >= total:
                break
            await asyncio.sleep(0.2)
        await publishing
        figures.dead, figures.pending = await _dead_and_pending(conn, app)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        try:
            supervisor.wait(timeout=60)
        except subprocess.TimeoutExpired:
            supervisor.kill()
        log.close()
        await _delete(conn, app)
        await conn.close()
    worker_log = (workdir / "worker.log").read_text(errors="replace")
    figures.given_back = worker_log.count("back to the line")
    handled, figures.handlings, figures.violations = count(_read(record))
    figures.handled = len(handled)
    figures.lost = max(0, figures.published - figures.handled - figures.dead - figures.pending)
    figures.seconds = time.monotonic() - started
    return figures


async def _wait_declared(
    conn: AbstractRobustConnection,
    mains: tuple[str, ...],
    proc: subprocess.Popen[bytes],
    log: Path,
) -> None:
    for _ in range(300):
        # Its last lines say why (no consistent-hash exchange on the broker, ...).
        assert_running(proc, log, "rabbitq worker --processes")
        channel = await conn.channel()
        try:
            for name in mains:
                await channel.declare_queue(name, passive=True)
            return
        except aio_pika.exceptions.ChannelClosed:
            await asyncio.sleep(0.1)
        finally:
            with contextlib.suppress(Exception):
                await channel.close()
    raise RuntimeError("the partition queues were never declared")


async def _publish(app: object, keys: int, per_key: int, figures: Figures) -> None:
    """Round by round: seq 1 of every key (concurrently), confirmed, then seq 2, ..."""
    from .ordering_service import Entry, fails_first

    async with app.publisher() as pub:  # type: ignore[attr-defined]
        for seq in range(1, per_key + 1):
            batch = [
                Entry(key=f"k{k}", seq=seq, fail_first=fails_first(k, seq)) for k in range(keys)
            ]
            await asyncio.gather(*(pub.publish(m, message_id=f"k{m.key}-{seq}") for m in batch))
            figures.published += len(batch)
            figures.failing_first += sum(m.fail_first for m in batch)


def _active_child(lines: list[str], supervisor: int) -> int | None:
    """A worker process that handled something lately (and is a live child)."""
    for line in reversed(lines[-200:]):
        pid = int(line.split()[0])
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/stat").read_text().split()[3] == str(supervisor):
                return pid
    return None


async def _dead_and_pending(conn: AbstractRobustConnection, app: object) -> tuple[int, int]:
    topology = app.topology()  # type: ignore[attr-defined]
    channel = await conn.channel()
    dlq = await channel.declare_queue(topology.dlq.name, passive=True)
    dead = dlq.declaration_result.message_count or 0
    pending = 0
    for spec in topology.partitioning.queues:
        q = await channel.declare_queue(spec.name, passive=True)
        pending += q.declaration_result.message_count or 0
    await channel.close()
    return dead, pending


async def _delete(conn: AbstractRobustConnection, app: object) -> None:
    topology = app.topology()  # type: ignore[attr-defined]
    channel = await conn.channel()
    for spec in (*topology.partitioning.queues, topology.dlq):
        with contextlib.suppress(Exception):
            await channel.queue_delete(spec.name)
    for name in (topology.partitioning.exchange, topology.exchange):
        with contextlib.suppress(Exception):
            await channel.exchange_delete(name)
    with contextlib.suppress(Exception):
        await channel.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--per-key", type=int, default=200)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--sigterm", action="store_true", help="stop workers with SIGTERM")
    parser.add_argument("--work", type=float, default=0.002, help="mean handler seconds")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = asyncio.run(
        run(
            keys=args.keys,
            per_key=args.per_key,
            kills=args.kills,
            processes=args.processes,
            partitions=args.partitions,
            url=args.url,
            stop=signal.SIGTERM if args.sigterm else signal.SIGKILL,
            work=args.work,
        )
    )
    if args.json:
        print(orjson.dumps({**figures.__dict__, "duplicates": figures.duplicates}).decode())
    else:
        print("\n".join(figures.lines()))
    return 0 if figures.violations == 0 and figures.lost == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
