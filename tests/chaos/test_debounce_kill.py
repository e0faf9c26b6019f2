"""The counted proof of debounce under ``kill -9``: bursts of publishes on many keys, the
workers killed while the bursts' last messages run, with the PostgreSQL and the Redis
backend (the shared broker; workers are ``rabbitq worker`` processes,
:mod:`tests.chaos.debounce_service`).

Every burst is published before the workers start (so each key's last publish is its
latest whatever the machine's speed), then two workers handle them and one is killed
every couple of seconds while handlers run (and another started). Counted: the runs
of superseded messages (must be 0), the keys whose last payload never completed (must
be 0) and, with PostgreSQL, the effect rows written in ``ctx.transaction()`` (exactly one
per key, the last payload's). With Redis the effect is outside the store: a kill between
it and the done mark repeats it, counted and reported (at least once).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from rabbitq.unique.release import key_release
from tests.chaos.debounce_service import PG_URL, Digest, build_app
from tests.effects.conftest import drop_tables
from tests.failure_kinds import SettleTimeout
from tests.helpers import declare_topology, delete_app_objects, redis_key_prefix, spawn_logged

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]
BURSTS, KEYS, SLOW = 8, 40, 1.0
KILLS = 4  # at most, at least 1.5 s apart, each while its worker runs a handler


@pytest.mark.parametrize("kind", ["postgres", "redis"])
async def test_each_burst_runs_its_last_payload_once_through_kills(
    kind, broker_url, connection, tmp_path
):
    prefix = f"t_{uuid.uuid4().hex[:10]}_" if kind == "postgres" else ""
    async with redis_key_prefix() as base:
        prefix = prefix or base
        try:
            await _run(kind, prefix, broker_url, connection, tmp_path)
        finally:
            if kind == "postgres":
                await drop_tables(prefix)


async def _run(kind: str, prefix: str, broker_url: str, connection, tmp_path: Path) -> None:
    queue = f"chaos.debounce.{uuid.uuid4().hex[:8]}"
    ledger = tmp_path / "ledger.log"
    app = build_app(queue, broker_url, kind, prefix, str(ledger), SLOW)
    if kind == "postgres":
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as pg:
            await pg.execute(f"CREATE TABLE {prefix}digests (user_id int, n int, message_id text)")
    env = {
        **os.environ, "DEBOUNCE_QUEUE": queue, "DEBOUNCE_URL": broker_url,
        "DEBOUNCE_STORE": kind, "DEBOUNCE_PREFIX": prefix, "DEBOUNCE_LEDGER": str(ledger),
        "DEBOUNCE_SLOW": str(SLOW),
    }  # fmt: skip
    workers: list[subprocess.Popen[bytes]] = []

    def spawn() -> None:
        args = [sys.executable, "-m", "rabbitq", "worker", "tests.chaos.debounce_service:app",
                "--log-level", "WARNING"]  # fmt: skip
        log = tmp_path / f"worker-{len(workers)}.log"
        workers.append(spawn_logged(args, log, cwd=ROOT, env=env))

    def lines() -> list[list[str]]:
        return [ln.split(" ") for ln in ledger.read_text().splitlines()] if ledger.exists() else []

    last: dict[int, str] = {}
    ids: list[str] = []
    kills = 0
    try:
        await declare_topology(connection, app)
        async with app.publisher() as pub:
            for n in range(BURSTS):
                sent = await asyncio.gather(
                    *(pub.publish(Digest(user=k, n=n), debounce=0.5, unique_key=f"d:{k}")
                      for k in range(KEYS))
                )  # fmt: skip
                ids += sent
                last.update(enumerate(sent))
        spawn()
        spawn()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 180
        last_kill = loop.time()
        while True:
            entries = lines()
            done = {ln[2] for ln in entries if ln[0] == "done"}
            if set(last.values()) <= done:
                break
            if loop.time() >= deadline:
                raise SettleTimeout(f"the bursts' last messages: {set(last.values()) - done}", 180)
            await asyncio.sleep(0.3)
            busy = Counter(ln[1] for ln in entries if ln[0] == "start")
            busy.subtract(Counter(ln[1] for ln in entries if ln[0] == "done"))
            ripe = [w for w in workers if w.poll() is None and busy[str(w.pid)] > 0]
            if ripe and kills < KILLS and loop.time() - last_kill >= 1.5:
                ripe[0].send_signal(signal.SIGKILL)
                ripe[0].wait(timeout=30)
                kills, last_kill = kills + 1, loop.time()
                spawn()
        await asyncio.sleep(2 * SLOW + 1)  # anything still to come would show now
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
        await delete_app_objects(connection, app)
        for step in app.publish_steps:
            await step.store.close()  # type: ignore[attr-defined]
        assert key_release(app) is not None
    entries = lines()
    latest = set(last.values())
    started = Counter(ln[2] for ln in entries if ln[0] == "start")
    completed = Counter(ln[2] for ln in entries if ln[0] == "done")
    superseded_run = sum(c for mid, c in started.items() if mid not in latest)
    never = latest - set(completed)
    interrupted = sum(started.values()) - sum(completed.values())
    repeated = sum(c - 1 for c in completed.values() if c > 1)
    summary = (
        f"{kind}: {BURSTS} x {KEYS} debounced, {kills} kill -9: {len(latest)} keys, "
        f"runs started {sum(started.values())} (interrupted {interrupted}), superseded run "
        f"{superseded_run}, last payload never done {len(never)}, done twice {repeated}"
    )
    if kind == "postgres":
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as pg:
            cur = await pg.execute(f"SELECT user_id, n, message_id FROM {prefix}digests")
            rows = await cur.fetchall()
        per_key = Counter(user for user, _, _ in rows)
        summary += f"; effect rows {len(rows)} (keys not once: "
        summary += f"{sum(1 for k in range(KEYS) if per_key[k] != 1)})"
        assert sorted(rows) == sorted((k, BURSTS - 1, last[k]) for k in range(KEYS)), summary
    print("\n" + summary)
    assert kills >= 2 and interrupted >= 1, summary  # the kills did land mid-run
    assert superseded_run == 0 and not never, summary
