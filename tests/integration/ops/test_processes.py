"""``rabbitq worker --processes 2`` as a real process tree: both workers consume,
``/metrics`` sums them exactly, a worker killed with SIGKILL is restarted and its work
is redone, and SIGTERM to the supervisor drains both and exits 0 with nothing lost."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rabbitq import Message, RetryPolicy
from tests.helpers import declare_topology, drain_queue, wait_for
from tests.scrape import http_get, logged_port, scrape, total

pytestmark = [pytest.mark.broker, pytest.mark.slow]


class Task(Message, type="test.procs.task"):
    n: int
    fail: int = 0
    sleep: float = 0.0


MODULE = """\
import asyncio
import os

from rabbitq import App, Context, Message, RetryPolicy


class Task(Message, type="test.procs.task"):
    n: int
    fail: int = 0
    sleep: float = 0.0


app = App(queue={queue!r}, exchange={exchange!r}, prefetch=4, retry=RetryPolicy(delays=(0.2,)))
DONE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "done.txt")


@app.handler(Task)
async def task(msg: Task, ctx: Context) -> None:
    await asyncio.sleep(msg.sleep)
    if ctx.attempt <= msg.fail:
        raise RuntimeError("flaky")
    with open(DONE, "a") as f:  # one short line per write: appends do not interleave
        f.write(f"{{os.getpid()}} {{msg.n}}\\n")
"""


def done(path: Path) -> list[tuple[int, int]]:
    """(pid, n) for each completed task."""
    if not path.exists():
        return []
    return [
        (int(pid), int(n))
        for pid, n in (line.split() for line in path.read_text().splitlines() if line)
    ]


async def test_two_worker_processes_sum_their_metrics_survive_a_kill_and_drain_on_sigterm(
    make_app, connection, broker_url, tmp_path
):
    app = make_app(retry=RetryPolicy(delays=(0.2,)), prefetch=4)
    (tmp_path / "procs_app.py").write_text(MODULE.format(queue=app.queue, exchange=app.exchange))
    await declare_topology(connection, app)  # so that the test app can be deleted after
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    log_path = tmp_path / "worker.log"
    done_path = tmp_path / "done.txt"
    env = {**os.environ, "RABBITQ_URL": broker_url, "TMPDIR": str(tmp)}
    command = [
        *(sys.executable, "-m", "rabbitq", "worker", "procs_app:app", "--processes", "2"),
        # port 0: the supervisor binds a free port and says which (none is picked before)
        *("--metrics-port", "0", "--metrics-bind", "127.0.0.1", "--grace-period", "10"),
    ]
    with log_path.open("w") as log:
        proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=log)
    try:
        up = [(proc, log_path)]  # the supervisor: if it dies, its last lines say why
        await wait_for(
            lambda: logged_port(log_path.read_text()), timeout=60, interval=0.2, running=up
        )
        base = f"http://127.0.0.1:{logged_port(log_path.read_text())}"

        async def answers(path: str, status: int) -> bool:
            try:
                return (await asyncio.to_thread(http_get, base + path, 2))[0] == status
            except OSError:  # not listening yet
                return False

        await wait_for(lambda: answers("/readyz", 200), timeout=60, interval=0.2, running=up)
        assert await answers("/healthz", 200)

        # 1. Both consume, and /metrics is the exact sum of both.
        async with app.publisher() as pub:
            await pub.publish_many(
                [Task(n=n, sleep=0.05, fail=1 if n % 4 == 0 else 0) for n in range(40)]
            )

        def processed() -> dict[str, float]:
            s = scrape(base)
            return {
                o: total(s, "rabbitq_messages_processed_total", queue=app.queue, outcome=o)
                for o in ("success", "retried", "dead_lettered")
            }

        await wait_for(
            lambda: asyncio.to_thread(lambda: processed()["success"] >= 40),
            timeout=60,
            interval=0.2,
        )
        assert await asyncio.to_thread(processed) == {
            "success": 40,
            "retried": 10,
            "dead_lettered": 0,
        }
        s = await asyncio.to_thread(scrape, base)
        assert total(s, "rabbitq_messages_received_total", queue=app.queue) == 50
        assert total(s, "rabbitq_retries_total", queue=app.queue, delay="200ms") == 10
        assert total(s, "rabbitq_prefetch", queue=app.queue) == 8  # 4 in each
        assert total(s, "rabbitq_connection_up") == 1
        pids = {pid for pid, _ in done(done_path)}
        assert len(pids) == 2, "both worker processes handled tasks"
        assert sorted(n for _, n in done(done_path)) == list(range(40))

        # 2. A worker killed mid-work is restarted; its unacked tasks are redone.
        async with app.publisher() as pub:
            await pub.publish_many([Task(n=n, sleep=0.3) for n in range(100, 116)])
        await wait_for(lambda: any(n >= 100 for _, n in done(done_path)), timeout=30)
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        await wait_for(lambda: "killed by SIGKILL" in log_path.read_text(), timeout=10)
        await wait_for(lambda: {n for _, n in done(done_path)} >= set(range(100, 116)), timeout=60)
        await wait_for(lambda: answers("/readyz", 200), timeout=60, interval=0.2)
        text = log_path.read_text()
        assert f"(pid {victim}) exited unexpectedly (killed by SIGKILL); restarting" in text
        assert text.count("started worker process") == 3

        # 3. SIGTERM to the supervisor drains both and exits 0; nothing is lost.
        async with app.publisher() as pub:
            await pub.publish_many([Task(n=n, sleep=0.3) for n in range(200, 220)])
        await wait_for(lambda: any(n >= 200 for _, n in done(done_path)), timeout=30)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    assert "all worker processes stopped" in text, text
    completed = {n for _, n in done(done_path)}
    left = {Task.model_validate_json(m.body).n for m in await drain_queue(connection, app.queue)}
    assert completed | left >= set(range(200, 220)), "every task is done or back in the queue"
    assert not list(tmp.glob("rabbitq-metrics-*")), "the metrics directory is removed"
    shutil.rmtree(tmp, ignore_errors=True)
