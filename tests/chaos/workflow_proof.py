"""The counted workflow proof, written once with a size: chords of 10 members, 20% of
members failing their first attempt, every chord published twice (each member twice,
with the same ids), worker processes killed with ``kill -9`` at random while they run;
and a chain of 5 whose third step is dead-lettered, then replayed.

It counts, per chord: the callback's copies on the wire (a queue of its own is bound to
the callback's type, so every publish lands there once), the callback's handler runs,
whether the callback ran before its last member succeeded, and the members lost.

Run at full size from the repository's root (it prints the figures)::

    .venv/bin/python -m tests.chaos.workflow_proof --chords 1000 --kills 12

``tests/chaos/test_workflow_proof.py`` runs a reduced size in the suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aio_pika
import orjson
import psycopg
import redis.asyncio as aioredis

from rabbitq import chain, chord, dlq
from tests.chaos.workflow_service import (
    MEMBERS,
    PG,
    REDIS,
    Finish,
    Item,
    Step,
    build_app,
    finish_table,
)
from tests.failure_kinds import SettleTimeout
from tests.helpers import (
    declare_topology,
    delete_app_objects,
    queue_depth,
    spawn_logged,
    unexpected_exits,
)

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Figures:
    chords: int
    members: int
    failing_first: int
    kills: int
    callbacks: int  # chords whose callback arrived
    copies: Counter[int]  # copies on the wire per chord -> number of chords
    runs: Counter[int]  # callback handler runs per chord -> number of chords
    early: int  # callbacks that ran before every member succeeded
    bad_results: int  # callbacks that did not read every member's result
    members_lost: int
    dlq: int
    chain: list[int]
    mode: str

    def line(self) -> str:
        return (
            f"[{self.mode}] {self.chords} chords x {MEMBERS} ({self.members} members, each "
            f"published twice; {self.failing_first} failing their first attempt), "
            f"{self.kills} kill -9: "
            f"callbacks {self.callbacks}/{self.chords}, copies per chord {dict(self.copies)}, "
            f"runs per chord {dict(self.runs)}, early {self.early}, bad results "
            f"{self.bad_results}, members lost {self.members_lost}, DLQ {self.dlq}; "
            f"chain steps {self.chain}"
        )


class Proof:
    """Workers of tests.chaos.workflow_service, the publishing, the chaos and the tally."""

    def __init__(self, *, broker_url: str, chords: int, mode: str = "redis") -> None:
        uid = uuid.uuid4().hex[:8]
        self.prefix = f"wfproof:{uid}:"
        self.n = chords
        self.mode = mode
        self.app = build_app(
            queue=f"wfproof.{uid}",
            exchange=f"wfproof.{uid}.x",
            url=broker_url,
            mode=mode,
            prefix=self.prefix,
            slow=0.02,
        )
        self.env = {
            **os.environ,
            "WF_QUEUE": self.app.queue,
            "WF_EXCHANGE": self.app.exchange,
            "WF_URL": broker_url,
            "WF_MODE": mode,
            "WF_PREFIX": self.prefix,
        }
        self.url = broker_url
        self.sink = f"wfproof.{uid}.finish"
        self.workers: list[subprocess.Popen[bytes]] = []
        self.logs = Path(tempfile.mkdtemp(prefix="rabbitq-wfproof-"))
        """Each worker's output: ``worker-N.log``."""
        self.kills = 0
        self.failing_first = 0
        self.chain_id = ""
        self._conn: Any = None
        self._redis = aioredis.Redis.from_url(REDIS)

    async def __aenter__(self) -> Proof:
        if self.mode == "postgres":
            async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as pg:
                await pg.execute(f"CREATE TABLE {finish_table(self.prefix)} (row jsonb)")
        self._conn = await aio_pika.connect_robust(self.url)
        await declare_topology(self._conn, self.app)  # copies wait for a worker
        channel = await self._conn.channel()
        sink = await channel.declare_queue(self.sink, durable=True)
        await sink.bind(self.app.exchange, routing_key=Finish.type_name())
        await channel.close()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(self.logs, ignore_errors=True)
        channel = await self._conn.channel()
        with contextlib.suppress(Exception):
            await channel.queue_delete(self.sink)
        await channel.close()
        await delete_app_objects(self._conn, self.app)
        await self._conn.close()
        # every key of the run (the idempotency, status and chord keys too) is under it
        async for key in self._redis.scan_iter(match=self.prefix + "*", count=1000):
            await self._redis.delete(key)
        await self._redis.aclose()
        if self.mode == "postgres":
            tables = finish_table(self.prefix).removesuffix("finish")
            async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as pg:
                cur = await pg.execute(
                    "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (tables + "%",)
                )
                for (name,) in await cur.fetchall():
                    await pg.execute(f'DROP TABLE IF EXISTS "{name}"')

    def spawn(self) -> None:
        self.workers.append(
            spawn_logged(
                [sys.executable, "-m", "rabbitq", "worker", "tests.chaos.workflow_service:app",
                 "--log-level", "ERROR", "--grace-period", "5"],
                self.logs / f"worker-{len(self.workers) + 1}.log", cwd=ROOT, env=self.env,
            )
        )  # fmt: skip

    def died(self) -> str:
        """Why workers died that the proof did not kill (``""``: none did)."""
        return unexpected_exits(
            (p, self.logs / f"worker-{i + 1}.log") for i, p in enumerate(self.workers)
        )

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.workers if p.poll() is None]

    async def publish(self, seed: int = 7) -> None:
        """Every chord twice (the same ids), members in order, 20% failing first."""
        rnd = random.Random(seed)
        made = []
        for c in range(self.n):
            name = f"c{c}"
            fails = [rnd.random() < 0.2 for _ in range(MEMBERS)]
            self.failing_first += sum(fails)
            members = [Item(chord=name, i=i, fail_first=f) for i, f in enumerate(fails)]
            made.append(chord(members, then=Finish(chord=name), id=f"{self.prefix}{name}"))
        async with self.app.publisher() as pub:
            for start in range(0, len(made), 50):
                batch = made[start : start + 50]
                await asyncio.gather(*(pub.publish(c) for c in batch))
                await asyncio.gather(*(pub.publish(c) for c in batch))  # each member twice
            c5 = chain(*(Step(chain="ch", n=n) for n in range(1, 6)))
            self.chain_id = await pub.publish(c5)

    async def chaos(self, kills: int, seed: int = 13) -> None:
        """Kill a worker with SIGKILL every 0.5 to 2 s (and start another) ``kills``
        times, while callbacks are still missing."""
        rnd = random.Random(seed)
        while self.kills < kills and await self.callbacks_in() < self.n:
            await asyncio.sleep(rnd.uniform(0.5, 2.0))
            alive = self.alive()
            if alive:
                rnd.choice(alive).send_signal(signal.SIGKILL)
                self.kills += 1
                self.spawn()

    async def callbacks_in(self) -> int:
        return len(await self.finish_rows())

    async def finish_rows(self) -> list[Any]:
        """The callbacks' runs: ``[chord, message_id, members seen, results ok, pid]``."""
        if self.mode == "postgres":
            async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as pg:
                cur = await pg.execute(f"SELECT row FROM {finish_table(self.prefix)}")
                return [r[0] for r in await cur.fetchall()]
        return [orjson.loads(r) for r in await self._redis.lrange(self.prefix + "finish", 0, -1)]

    async def replay_chain_step(self) -> int:
        """Replay the dead-lettered chain step (the DLQ holds only it)."""
        tally = await dlq.replay(self.app.queue, url=self.url)
        return tally.done

    async def settle(self, timeout: float) -> None:
        """Until every callback ran, the chain's step 3 is in the DLQ (then replayed), the
        chain finished, and every queue is empty for 3 s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        quiet = replayed = 0
        while loop.time() < deadline:
            await asyncio.sleep(0.5)
            if not self.alive():
                self.spawn()
            dead = await queue_depth(self._conn, self.app.topology().dlq.name)
            if not replayed and dead:
                replayed = await self.replay_chain_step()
            depth = sum(
                [await queue_depth(self._conn, q.name) for q in self.app.topology().queues]
            )
            steps = await self._redis.llen(f"{self.prefix}chain:ch")
            ready = await self.callbacks_in() >= self.n and steps >= 4 and replayed
            quiet = quiet + 1 if ready and depth == 0 else 0
            if quiet >= 6:
                return
        raise SettleTimeout(f"the workflows to settle\n{self.died()}".strip(), timeout)

    async def figures(self) -> Figures:
        channel = await self._conn.channel()
        queue = await channel.declare_queue(self.sink, passive=True)
        copies: Counter[str] = Counter()
        while (msg := await queue.get(fail=False, no_ack=True)) is not None:
            copies[orjson.loads(msg.body)["chord"]] += 1
        await channel.close()
        rows = await self.finish_rows()
        runs = Counter(r[0] for r in rows)
        lost = 0
        for c in range(self.n):
            lost += MEMBERS - int(await self._redis.scard(f"{self.prefix}done:c{c}"))
        chain_steps = [int(x) for x in await self._redis.lrange(f"{self.prefix}chain:ch", 0, -1)]
        return Figures(
            chords=self.n,
            members=self.n * MEMBERS,
            failing_first=self.failing_first,
            kills=self.kills,
            callbacks=len(runs),
            copies=Counter(copies[f"c{c}"] for c in range(self.n)),
            runs=Counter(runs[f"c{c}"] for c in range(self.n)),
            early=sum(1 for r in rows if r[2] < MEMBERS),
            bad_results=sum(1 for r in rows if not r[3]),
            members_lost=lost,
            dlq=await queue_depth(self._conn, self.app.topology().dlq.name),
            chain=chain_steps,
            mode=self.mode,
        )


async def prove(
    *,
    broker_url: str,
    chords: int,
    kills: int,
    workers: int = 3,
    timeout: float = 600,
    mode: str = "redis",
) -> Figures:
    async with Proof(broker_url=broker_url, chords=chords, mode=mode) as proof:
        for _ in range(workers):
            proof.spawn()
        await proof.publish()
        await proof.chaos(kills)
        await proof.settle(timeout)
        return await proof.figures()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chords", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=12)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--mode", choices=("redis", "postgres"), default="redis")
    default_url = os.environ.get("RABBITQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--url", default=default_url)
    args = parser.parse_args()
    figures = asyncio.run(
        prove(
            broker_url=args.url,
            chords=args.chords,
            kills=args.kills,
            workers=args.workers,
            mode=args.mode,
        )
    )
    print(figures.line())


if __name__ == "__main__":
    main()
