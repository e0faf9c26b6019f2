"""Cancel through a worker killed with ``kill -9``, counted: 1,000 delayed messages,
500 of them cancelled while they wait in the delay ladder; when about a third of the
others were handled the worker is killed and another started. Exactly the 500 kept
ones are handled (a message in flight at the kill may run again: counted and reported,
as at-least-once allows), and none of the 500 cancelled ones ever begins: the check is
the store's, so a redelivery after the kill is looked up again like a first arrival."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import redis.asyncio as aioredis

from rabbitq import App
from rabbitq.cancellation.cancel import close_stores
from tests.chaos.cancel_service import REDIS, Capture, build_app
from tests.helpers import ROOT, delete_app_objects, wait_for


def worker(url: str, queue: str, ledger: Path, prefix: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CANCEL_QUEUE": queue, "CANCEL_LEDGER": str(ledger),
           "CANCEL_PREFIX": prefix}  # fmt: skip
    env.pop("RABBITQ_URL", None)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rabbitq", "worker", "tests.chaos.cancel_service:app",
             "--url", url, "--log-level", "info"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def ledger_ids(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [line.split(" ")[0] for line in path.read_text().splitlines() if line]


async def test_500_of_1000_cancelled_through_a_worker_kill(broker_url, connection, tmp_path):
    tag = uuid.uuid4().hex[:10]
    queue, prefix = f"t.{tag}.cancel", f"rabbitq-test:{tag}:"
    ledger, log = tmp_path / "ledger", tmp_path / "worker.log"
    app: App = build_app(queue, str(ledger), prefix, url=broker_url)
    first = worker(broker_url, queue, ledger, prefix, log)
    procs = [first]
    try:
        await wait_for(lambda: "consuming" in log.read_text() or first.poll() is not None, 60)
        async with app.publisher() as pub:
            ids: list[str] = []
            for start in range(0, 1000, 50):  # due 6 to 11 s after their publish
                ids += await asyncio.gather(
                    *(pub.publish(Capture(n=n), delay=6 + n % 50 / 10)
                      for n in range(start, start + 50))
                )  # fmt: skip
        cancelled, kept = set(ids[::2]), set(ids[1::2])
        reports = await app.cancel(*sorted(cancelled))
        assert {r.outcome for r in reports} == {"cancelled"}, reports[:2]

        await wait_for(lambda: len(set(ledger_ids(ledger))) >= 150, 120)
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        procs.append(worker(broker_url, queue, ledger, prefix, log))

        await wait_for(lambda: set(ledger_ids(ledger)) >= kept, 180)
        await asyncio.sleep(2.0)  # anything that would run late, runs now
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        await delete_app_objects(connection, app)
        await close_stores(app)
        client = aioredis.Redis.from_url(REDIS)
        async for name in client.scan_iter(match=prefix + "*", count=1000):
            await client.delete(name)
        await client.aclose()

    handled = collections.Counter(ledger_ids(ledger))
    ran_cancelled = sorted(set(handled) & cancelled)
    again = {m: c for m, c in handled.items() if c > 1}
    print(
        f"kept handled {len(set(handled) & kept)}/500, cancelled handled {len(ran_cancelled)}, "
        f"run twice (in flight at the kill) {len(again)}"
    )
    assert ran_cancelled == [], f"{len(ran_cancelled)} cancelled messages ran"
    assert set(handled) == kept
    assert len(again) <= 32, f"more ran twice than the killed worker's prefetch: {again}"
