"""Running the once-only service in worker processes, with kills and store cuts, and
counting what happened: effect rows per key, follow-ups published per key."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aio_pika
import psycopg
import redis.asyncio as aioredis

from rabbitq import App
from rabbitq.effects.redisstore import CLIENT_NAME

from ..failure_kinds import SettleTimeout
from ..helpers import (
    declare_topology,
    delete_app_objects,
    queue_depth,
    spawn_logged,
    unexpected_exits,
)
from .conftest import PG_URL, REDIS_URL
from .once_service import Pay, build_app

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Count:
    """The tally of one run."""

    keys: int
    effects: Counter[str]
    paid: Counter[str]  # follow-ups received per key
    kills: int = 0
    cuts: int = 0
    runs: int = 0  # handler runs started
    paid_ids: dict[str, set[str]] | None = None  # follow-up message ids per key
    key_runs: Counter[str] | None = None  # handler runs started per key

    @property
    def paid_distinct_ids(self) -> int:
        """Keys whose follow-ups arrived with more than one message_id (0: every repeat
        is recognisable downstream)."""
        return sum(1 for ids in (self.paid_ids or {}).values() if len(ids) > 1)

    @property
    def lost(self) -> int:
        return sum(1 for k in range(self.keys) if self.effects[f"k{k}"] == 0)

    @property
    def effects_not_once(self) -> int:
        return sum(1 for k in range(self.keys) if self.effects[f"k{k}"] != 1)

    @property
    def duplicate_effects(self) -> int:
        return sum(n - 1 for n in self.effects.values() if n > 1)

    @property
    def paid_lost(self) -> int:
        return sum(1 for k in range(self.keys) if self.paid[f"k{k}"] == 0)

    @property
    def paid_duplicates(self) -> int:
        return sum(n - 1 for n in self.paid.values() if n > 1)

    def line(self, name: str) -> str:
        per_key = Counter(self.effects[f"k{k}"] for k in range(self.keys))
        return (
            f"{name}: keys={self.keys} published={self.keys * 3} effect rows per key="
            f"{dict(sorted(per_key.items()))} lost={self.lost} "
            f"duplicate effects={self.duplicate_effects} follow-ups lost={self.paid_lost} "
            f"follow-up duplicates={self.paid_duplicates} kills={self.kills} cuts={self.cuts} "
            f"handler runs={self.runs} (interrupted or repeated: {self.runs - self.keys}) "
            f"keys with follow-ups under 2+ message ids={self.paid_distinct_ids}"
        )


class OnceRun:
    """Workers of tests.effects.once_service for one test, and their tally."""

    def __init__(
        self,
        *,
        mode: str,
        uid: str,
        prefix: str,
        broker_url: str,
        outbox: bool = False,
        fail_first: bool = False,
        slow: float = 0.03,
        prefetch: int = 16,
        timeout: float | None = None,
    ) -> None:
        self.mode = mode
        self.prefix = prefix
        self.app: App = build_app(
            queue=f"once.{uid}",
            exchange=f"once.{uid}.x",
            url=broker_url,
            mode=mode,
            prefix=prefix,
            outbox=outbox,
            fail_first=fail_first,
            slow=slow,
            prefetch=prefetch,
        )
        self.env = {
            **os.environ,
            "ONCE_MODE": mode,
            "ONCE_PREFIX": prefix,
            "ONCE_QUEUE": self.app.queue,
            "ONCE_EXCHANGE": self.app.exchange,
            "ONCE_URL": broker_url,
            "ONCE_PG": PG_URL,
            "ONCE_REDIS": REDIS_URL,
            "ONCE_OUTBOX": "1" if outbox else "",
            "ONCE_FAIL_FIRST": "1" if fail_first else "",
            "ONCE_SLOW": str(slow),
            "ONCE_PREFETCH": str(prefetch),
            "ONCE_TIMEOUT": "" if timeout is None else str(timeout),
        }
        self.url = broker_url
        self.workers: list[subprocess.Popen[bytes]] = []
        self.logs = Path(tempfile.mkdtemp(prefix="rabbitq-once-"))
        """Each worker's output: ``worker-N.log``."""
        self.kills = 0
        self.cuts = 0
        self.sink = f"once.{uid}.paid"
        self._conn: Any = None

    async def __aenter__(self) -> OnceRun:
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as pg:
            await pg.execute(
                f"CREATE TABLE {self.prefix}effects"
                " (id bigserial, key text, message_id text, pid int)"
            )
            await pg.execute(f"CREATE TABLE {self.prefix}runs (key text)")
        self._conn = await aio_pika.connect_robust(self.url)
        # The queues exist before any worker, so that every copy waits for one.
        await declare_topology(self._conn, self.app)
        channel = await self._conn.channel()
        sink = await channel.declare_queue(self.sink, durable=True)
        await sink.bind(self.app.exchange, routing_key="once.paid")
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
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            async for name in client.scan_iter(
                match=self.prefix.replace("_", ":") + "*", count=1000
            ):
                await client.delete(name)
        finally:
            await client.aclose()

    def spawn(self, **env: str) -> subprocess.Popen[bytes]:
        """A worker process; ``env`` adds to its environment (e.g. ONCE_KILL_AT)."""
        proc = spawn_logged(
            [
                sys.executable,
                "-m",
                "rabbitq",
                "worker",
                "tests.effects.once_service:app",
                "--log-level",
                "WARNING",
                "--grace-period",
                "5",
            ],
            self.logs / f"worker-{len(self.workers) + 1}.log",
            cwd=ROOT,
            env={**self.env, **env},
        )
        self.workers.append(proc)
        return proc

    def died(self) -> str:
        """Why workers died that the run did not kill (``""``: none did)."""
        return unexpected_exits(
            (p, self.logs / f"worker-{i + 1}.log") for i, p in enumerate(self.workers)
        )

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.workers if p.poll() is None]

    async def publish(self, keys: int, copies: int = 3) -> None:
        """Every key ``copies`` times with the same message_id, shuffled."""
        order = [k for k in range(keys) for _ in range(copies)]
        random.Random(7).shuffle(order)
        async with self.app.publisher() as pub:
            for k in order:
                await pub.publish(Pay(key=f"k{k}"), message_id=f"pay-k{k}")

    async def kill_one(self, rnd: random.Random) -> None:
        """SIGKILL a worker that is handling messages (one that has written an effect:
        on a loaded machine a worker takes seconds to start) and start another."""
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as pg:
            cur = await pg.execute(f"SELECT DISTINCT pid FROM {self.prefix}effects")
            working = {r[0] for r in await cur.fetchall()}
        ripe = [p for p in self.alive() if p.pid in working]
        if ripe:
            rnd.choice(ripe).send_signal(signal.SIGKILL)
            self.kills += 1
            self.spawn()

    async def cut_store(self) -> None:
        """Cut every connection of the workers' store."""
        if self.mode == "redis":
            client = aioredis.Redis.from_url(REDIS_URL)
            try:
                for info in await client.client_list():
                    if info.get("name") == CLIENT_NAME:
                        await client.client_kill_filter(_id=info["id"])
                        self.cuts += 1
            finally:
                await client.aclose()
            return
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as pg:
            cur = await pg.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE pid <> pg_backend_pid() AND datname = 'test' AND query LIKE %s",
                (f"%{self.prefix}%",),
            )
            self.cuts += sum(1 for r in await cur.fetchall() if r[0])

    async def chaos(
        self, keys: int, *, kill: bool, cut: bool, kills: int = 6, seed: int = 13
    ) -> None:
        """Kill workers (``kills`` times) and cut the store's connections at random moments
        while keys are still without their effect (at most 90 s)."""
        rnd = random.Random(seed)
        loop = asyncio.get_running_loop()
        end = loop.time() + 90
        while loop.time() < end and self.kills < kills and len(await self.effects()) < keys:
            await asyncio.sleep(rnd.uniform(0.5, 1.2))
            if kill and rnd.random() < 0.7:
                await self.kill_one(rnd)
            if cut and rnd.random() < 0.5:
                await self.cut_store()

    async def settle(self, keys: int, timeout: float = 120) -> None:
        """Wait until every key has an effect and every queue of the app is empty for a
        while, with at least one worker alive."""
        if not self.alive():
            self.spawn()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        quiet = 0
        while loop.time() < deadline:
            await asyncio.sleep(0.5)
            depth = 0
            for spec in self.app.topology().queues:
                if not spec.name.endswith(".dlq"):
                    depth += await queue_depth(self._conn, spec.name)
            done = len(await self.effects()) == keys
            quiet = quiet + 1 if depth == 0 and done else 0
            if quiet >= 8:  # 4 s with nothing waiting: leases held by the dead have expired
                return
        raise SettleTimeout(f"the effects to settle\n{self.died()}".strip(), timeout)

    async def stop(self) -> None:
        for proc in self.alive():
            proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)

    async def effects(self) -> Counter[str]:
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as pg:
            cur = await pg.execute(f"SELECT key FROM {self.prefix}effects")
            return Counter(r[0] for r in await cur.fetchall())

    async def paid(self) -> tuple[Counter[str], dict[str, set[str]]]:
        import orjson

        channel = await self._conn.channel()
        queue = await channel.declare_queue(self.sink, passive=True)
        out: Counter[str] = Counter()
        ids: dict[str, set[str]] = {}
        while (msg := await queue.get(fail=False, no_ack=True)) is not None:
            key = orjson.loads(msg.body)["key"]
            out[key] += 1
            ids.setdefault(key, set()).add(msg.message_id or "")
        await channel.close()
        return out, ids

    async def dlq_depth(self) -> int:
        return await queue_depth(self._conn, self.app.topology().dlq.name)

    async def count(self, keys: int) -> Count:
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as pg:
            cur = await pg.execute(f"SELECT key, count(*) FROM {self.prefix}runs GROUP BY key")
            key_runs = Counter({key: int(n) for key, n in await cur.fetchall()})
        paid, ids = await self.paid()
        runs = sum(key_runs.values())
        effects = await self.effects()
        return Count(keys, effects, paid, self.kills, self.cuts, runs, ids, key_runs)


@contextlib.asynccontextmanager
async def relaying(run: OnceRun):  # type: ignore[no-untyped-def]
    """The app's outbox relay, in this process, for the duration of the block."""
    from rabbitq.effects.relay import Relay

    assert run.app.outbox is not None
    relay = Relay(run.app.outbox)
    task = asyncio.create_task(relay.run())
    try:
        yield relay
    finally:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while (await run.app.outbox.stats())[0] and loop.time() < deadline:
            await asyncio.sleep(0.1)
        relay.stop()
        await task
