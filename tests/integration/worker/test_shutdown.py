"""Shutdown of a real worker process (``rabbitq worker``) on SIGTERM/SIGINT under load.

The app module is written to ``tmp_path`` and the worker runs there as a subprocess.
Its handler appends each message_id to ``started.txt`` when it begins and to
``completed.txt`` when it is done (one line, flushed, per message), so that after the
process has exited, what was completed plus what is still in the queue can be compared
with what was published.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rabbitq import Message, RetryPolicy
from rabbitq.settings import url_password
from tests.helpers import declare_topology, drain_queue, queue_depth, wait_for

RETRY = RetryPolicy(delays=(1,))
# Exit may take a little longer than the grace period: cancelling the late handlers,
# returning their messages, closing the connection and the interpreter itself.
EXIT_MARGIN = 2.5


class Job(Message, type="test.shutdown.job"):
    n: int
    sleep: float


MODULE = """\
import asyncio
import time

from rabbitq import App, Context, Message, RetryPolicy


class Job(Message, type="test.shutdown.job"):
    n: int
    sleep: float


app = App(
    queue={queue!r},
    exchange={exchange!r},
    prefetch={prefetch},
    retry=RetryPolicy(delays={delays!r}),
)


def record(path: str, message_id: str) -> None:
    with open(path, "a") as f:
        f.write(message_id + "\\n")
        f.flush()


if {sync!r}:
    @app.handler(Job)
    def job(msg: Job, ctx: Context) -> None:
        record({started!r}, ctx.message_id)
        time.sleep(msg.sleep)
        record({completed!r}, ctx.message_id)
else:
    @app.handler(Job)
    async def job(msg: Job, ctx: Context) -> None:
        record({started!r}, ctx.message_id)
        await asyncio.sleep(msg.sleep)
        record({completed!r}, ctx.message_id)
"""


def rabbitq_command() -> str:
    """The ``rabbitq`` script of the environment running the tests."""
    beside = Path(sys.executable).parent / "rabbitq"
    found = str(beside) if beside.exists() else shutil.which("rabbitq")
    assert found, "the rabbitq command is not installed"
    return found


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


class WorkerProcess:
    """``rabbitq worker svc:app`` in ``tmp_path``, logs to ``worker.log``."""

    def __init__(self, tmp_path: Path, app, *, url: str, grace: float, sync: bool = False) -> None:
        self.dir = tmp_path
        self.started = tmp_path / "started.txt"
        self.completed = tmp_path / "completed.txt"
        self.log = tmp_path / "worker.log"
        (tmp_path / "svc.py").write_text(
            MODULE.format(
                queue=app.queue,
                exchange=app.exchange,
                prefetch=app.prefetch,
                delays=app.retry.delays,
                sync=sync,
                started=str(self.started),
                completed=str(self.completed),
            )
        )
        self.argv = [
            rabbitq_command(),
            "worker",
            "svc:app",
            "--url",
            url,
            "--grace-period",
            str(grace),
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "RABBITQ_URL"}
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                self.argv, cwd=self.dir, env=env, stdout=log, stderr=subprocess.STDOUT
            )

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait_ready(self) -> None:
        def ready() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.logs()
            return "consuming" in self.logs()

        await wait_for(ready, timeout=30)

    async def stop(self, sig: signal.Signals, *, timeout: float) -> tuple[int | None, float]:
        """Send ``sig``; return the exit code (None if still running) and seconds taken."""
        assert self.proc is not None
        sent = time.monotonic()
        self.proc.send_signal(sig)
        try:
            code = await asyncio.to_thread(self.proc.wait, timeout)
        except subprocess.TimeoutExpired:
            code = None
        return code, time.monotonic() - sent

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def worker_process(tmp_path, broker_url):
    made: list[WorkerProcess] = []

    def factory(app, *, grace: float, sync: bool = False) -> WorkerProcess:
        wp = WorkerProcess(tmp_path, app, url=broker_url, grace=grace, sync=sync)
        made.append(wp)
        return wp

    yield factory
    for wp in made:
        wp.kill()


def shutdown_app(make_app, *, prefetch: int):
    """The test-side twin of the generated module's app: same names, same topology."""
    app = make_app(prefetch=prefetch, retry=RETRY)

    @app.handler(Job)
    async def job(msg: Job) -> None:  # never runs here; declares the same binding
        raise AssertionError("the worker subprocess handles these")

    return app


def report(record_property, name: str, **counts: object) -> None:
    text = " ".join(f"{k}={v}" for k, v in counts.items())
    print(f"\n{name}: {text}")
    record_property(name, text)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_under_load_lets_in_flight_handlers_finish_exits_0_and_loses_nothing(
    sig, make_app, connection, worker_process, record_property
):
    grace = 5.0
    app = shutdown_app(make_app, prefetch=20)
    await declare_topology(connection, app)
    rng = random.Random(7)
    async with app.publisher() as pub:
        ids = await pub.publish_many(Job(n=n, sleep=rng.uniform(0.05, 0.2)) for n in range(300))
    published = set(ids)

    worker = worker_process(app, grace=grace)
    worker.start()
    await worker.wait_ready()
    await wait_for(lambda: len(lines(worker.completed)) >= 60, timeout=30)
    # Read completed first: whatever started by then and is not completed was in flight.
    completed_before = set(lines(worker.completed))
    in_flight = set(lines(worker.started)) - completed_before
    code, took = await worker.stop(sig, timeout=grace + 30)

    logs = worker.logs()
    assert code == 0, logs
    assert took < grace + EXIT_MARGIN, f"took {took:.2f}s to exit"

    started, completed = lines(worker.started), lines(worker.completed)
    left = [m.message_id for m in await drain_queue(connection, app.queue)]
    dup_completed = [mid for mid, k in Counter(completed).items() if k > 1]
    completed_and_left = set(completed) & set(left)
    report(
        record_property,
        f"shutdown_{sig.name}",
        published=len(published),
        completed=len(completed),
        left_in_queue=len(left),
        in_flight_at_signal=len(in_flight),
        finished_after_signal=len(set(completed) - completed_before),
        exit_seconds=f"{took:.2f}",
        duplicates=len(dup_completed) + len(completed_and_left),
    )

    assert in_flight and len(completed) < len(published), "the signal did not arrive under load"
    assert set(completed) | set(left) == published, "a message was lost"
    # Every handler in flight at the signal was let finish, and none was cut off.
    assert in_flight <= set(completed)
    assert set(started) == set(completed)
    assert dup_completed == [] and completed_and_left == set()
    assert len(left) == len(set(left))
    for spec in app.topology().queues[1:]:
        assert await queue_depth(connection, spec.name) == 0, f"{spec.name} is not empty"
    assert f"{sig.name} received: draining" in logs


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_handlers_slower_than_the_grace_period_are_returned_to_the_queue_and_exit_is_0(
    sync, make_app, connection, worker_process, record_property
):
    grace = 1.0
    app = shutdown_app(make_app, prefetch=10)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        ids = await pub.publish_many(Job(n=n, sleep=20) for n in range(30))

    worker = worker_process(app, grace=grace, sync=sync)
    worker.start()
    await worker.wait_ready()
    await wait_for(lambda: len(lines(worker.started)) == 10, timeout=30)
    code, took = await worker.stop(signal.SIGTERM, timeout=grace + 30)

    logs = worker.logs()
    report(
        record_property,
        f"slow_shutdown_{'sync' if sync else 'async'}",
        exit_code=code,
        exit_seconds=f"{took:.2f}",
    )
    assert code == 0, logs
    # The handlers sleep 20 s: an exit well before that proves they were not awaited. The
    # margin covers cancelling them, returning 10 messages, the close and the interpreter's
    # exit on a busy machine (usually well under a second).
    assert grace <= took < grace + 10, f"took {took:.2f}s to exit"
    assert lines(worker.completed) == []

    in_flight = set(lines(worker.started))
    left = await drain_queue(connection, app.queue)
    assert sorted(m.message_id for m in left) == sorted(ids), "a message was lost"
    returned = {m.message_id for m in left if m.redelivered}
    assert returned == in_flight
    assert "returning 10 message(s) to the queue" in logs


async def test_the_worker_never_logs_the_broker_password(
    make_app, connection, worker_process, broker_url
):
    password = url_password(broker_url)
    if not password:
        pytest.skip("the test broker's URL has no password")
    app = shutdown_app(make_app, prefetch=5)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        await pub.publish_many(Job(n=n, sleep=0.01) for n in range(5))

    worker = worker_process(app, grace=2.0)
    worker.start()
    await worker.wait_ready()
    await wait_for(lambda: len(lines(worker.completed)) == 5, timeout=30)
    code, _ = await worker.stop(signal.SIGTERM, timeout=30)

    logs = worker.logs()
    assert code == 0, logs
    assert "consuming" in logs and "stopped" in logs
    assert f":{password}@" not in logs
    assert ":***@" in logs  # the URL is shown, redacted
