"""Delayed messages through a worker kill and a broker restart, on a private node.

:func:`delays_under_faults` publishes ``messages`` reminders with random delays in
[0, ``max_delay``] s on quorum queues; a third of the way in the worker is killed with
``kill -9`` (another one takes over), and half-way the broker node is restarted. Every
message must arrive (none lost), once from the ladder (a delivery the broker did not
flag as redelivered; a redelivery after the kill or restart is counted apart), and none
before the time in its ``rabbitq-due`` header. The node runs with the dead-letter timer
docs/delays.md recommends for apps with delays (10 s, not 3.10's 180 s); messages the
broker still holds in a level once the wait runs out (sent on while their next hop was
down: :func:`held_by_broker`) are waited for, a few timer cycles, and counted apart. The lateness of
each first handling is reported (p50, p99). Messages handled twice are counted and
reported: at-least-once delivery allows a few across the restart (see the test). The
suite runs 2,000 messages over 60 s to stay within its time budget; docs/delays.md has
the figures of a 10,000-message, 120 s run too (``python -m tests.chaos.test_delays
10000 120``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rabbitq import App, PublishError
from rabbitq._ops import queue_watch
from rabbitq.ladder import plan as ladder

from ..broker_node import BrokerNode
from ..helpers import assert_running, declare_topology, delete_app_objects, queue_depth
from .delay_service import Reminder, arrivals, build_app
from .harness import connect_admin

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class DelayResult:
    published: int
    unconfirmed: int
    lost: int
    ladder_duplicates: int
    """Messages that came out of the ladder more than once (not flagged redelivered)."""
    redeliveries: int
    """Handlings again after the kill or the restart (flagged redelivered by the broker)."""
    early: int
    lateness: list[float]
    """Seconds from each message's due time to the start of its first handling."""
    quiet: list[float]
    """The lateness of the messages due before the kill: no fault in their way."""
    after: list[float]
    """The lateness of the messages due 10 s or more after the broker was back."""
    seconds: float
    twice: list[str]
    """Each message handled more than once: its handlings, relative to the faults."""
    left: str = ""
    """Where messages were left at the end: every queue's depth, the worker log's tail."""
    held: int = 0
    """Messages the broker still held in the ladder's levels when the wait for them ran
    out (dead-lettered, waiting for their next hop's confirm): waited for once more."""
    held_late: float = 0.0
    """Seconds after they were found held until the last of them arrived."""

    def percentile(self, p: float, of: list[float] | None = None) -> float:
        ordered = sorted(self.lateness if of is None else of)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    def summary(self) -> str:
        return (
            f"{self.published} delayed messages (unconfirmed {self.unconfirmed}): "
            f"lost {self.lost}, out of the ladder twice {self.ladder_duplicates}, "
            f"handled again after the kill/restart {self.redeliveries}, "
            f"early {self.early}; lateness p50 {self.percentile(50) * 1000:.0f} ms, "
            f"p99 {self.percentile(99) * 1000:.0f} ms, max {max(self.lateness) * 1000:.0f} ms; "
            f"the {len(self.quiet)} due before the kill: p50 "
            f"{self.percentile(50, self.quiet) * 1000:.0f} ms, p99 "
            f"{self.percentile(99, self.quiet) * 1000:.0f} ms; the {len(self.after)} due 10 s "
            f"after the restart: p50 {self.percentile(50, self.after) * 1000:.0f} ms, p99 "
            f"{self.percentile(99, self.after) * 1000:.0f} ms ({self.seconds:.0f} s)"
            + (
                f"; {self.held} held by the broker's dead-letter timer after the restart, "
                f"the last of them handled {self.held_late:.0f} s after they were found"
                if self.held
                else ""
            )
            + (f"\n{self.left}" if self.lost else "")
        )


def worker(url: str, queue: str, ledger: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DELAY_QUEUE": queue, "DELAY_LEDGER": str(ledger)}
    env.pop("RABBITQ_URL", None)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rabbitq", "worker", "tests.chaos.delay_service:app",
             "--url", url, "--log-level", "WARNING"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


HELD_CYCLES = 6
"""Timer cycles waited for messages the broker holds (it sends about 25 on per cycle)."""
DLX_TIMER_MS = 10_000
"""The private node's ``dead_letter_worker_publisher_confirm_timeout``: the 10 s that
docs/delays.md recommends for apps with delays, instead of 3.10's 180 s."""
ADVANCED = (
    f"[{{rabbit, [{{dead_letter_worker_publisher_confirm_timeout, {DLX_TIMER_MS}}}]}}].\n"
)


@pytest.fixture(scope="module")
def delay_node() -> Iterator[BrokerNode]:
    """A private node of this test's own, with the dead-letter timer docs/delays.md
    recommends (an ``advanced.config`` setting, so not on the shared chaos node)."""
    if shutil.which("rabbitmq-server") is None:
        if os.environ.get("CI"):
            pytest.fail("the delay test starts a private RabbitMQ node")
        pytest.skip("no rabbitmq-server")
    with BrokerNode.started("rabbitq-delays", advanced=ADVANCED) as node:
        yield node


def held_by_broker(node: BrokerNode, app: App) -> int:
    """Dead letters the broker holds in the ladder's levels: counted in a quorum queue's
    ``messages`` but neither ready nor unacked (docs/delays.md, "Restarts"). After a
    restart a level's dead-letter worker may send a message on before its next hop is
    back; it then waits for a confirm that never comes and sends it again only when
    :func:`dlx_timer` runs out (about 25 per cycle, measured)."""
    levels = {level.name for level in app.topology().ladder.levels}
    rows = json.loads(
        node.ctl("list_queues", "name", "messages", "messages_ready",
                 "messages_unacknowledged", "--formatter", "json")
    )  # fmt: skip
    return sum(queue_watch.held_by_broker(row) for row in rows if row["name"] in levels)


def dlx_timer(node: BrokerNode) -> float:
    """Seconds the node's dead-letter workers wait for a confirm before sending again
    (``dead_letter_worker_publisher_confirm_timeout``, 180 s by default on 3.10)."""
    setting = "dead_letter_worker_publisher_confirm_timeout"
    out = node.ctl("eval", f"application:get_env(rabbit, {setting}).")
    found = re.search(r"\d+", out)
    return int(found.group()) / 1000 if found else 180.0


async def delays_under_faults(
    node: BrokerNode, workdir: Path, *, messages: int = 2000, max_delay: float = 60.0
) -> DelayResult:
    began = time.monotonic()
    queue = f"chaos.delay.{uuid.uuid4().hex[:8]}"
    ledger = workdir / "arrivals.log"
    app = build_app(queue, str(ledger), url=node.url)
    connection = await connect_admin(node.url)
    procs: list[subprocess.Popen[bytes]] = []
    published: set[str] = set()
    unconfirmed = 0
    left = ""
    held = 0
    held_seen = 0.0
    try:
        await declare_topology(connection, app)
        procs.append(worker(node.url, queue, ledger, workdir / "worker.log"))
        start = time.time()
        async with app.publisher(retry_for=30) as pub:
            sem = asyncio.Semaphore(64)

            async def one(n: int) -> None:
                nonlocal unconfirmed
                async with sem:
                    try:
                        mid = await pub.publish(Reminder(n=n), delay=random.uniform(0, max_delay))
                    except PublishError:
                        unconfirmed += 1
                    else:
                        published.add(mid)

            await asyncio.gather(*(one(n) for n in range(messages)))
        # a third of the way: kill -9 the worker, start another
        await asyncio.sleep(max(0.0, start + max_delay / 3 - time.time()))
        assert_running(procs[0], workdir / "worker.log")
        killed = time.time()
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=30)
        procs.append(worker(node.url, queue, ledger, workdir / "worker.log"))
        # half-way: restart the broker node (its queues, the ladder's too, are durable)
        await asyncio.sleep(max(0.0, start + max_delay / 2 - time.time()))
        down = time.time()
        await asyncio.to_thread(node.restart_app, 2.0)
        up = time.time()
        deadline = time.monotonic() + max_delay + 60
        cycles = 0
        while not published <= {a.message_id for a in arrivals(ledger)}:
            if time.monotonic() >= deadline:
                # Not arrived by now: held in a level by the broker's dead-letter timer
                # (see held_by_broker), or lost. Held ones come out a chunk per timer
                # cycle; wait for a few cycles while any are held.
                now_held = await asyncio.to_thread(held_by_broker, node, app)
                if not now_held or cycles == HELD_CYCLES:
                    break
                held, held_seen = max(held, now_held), held_seen or time.time()
                cycles += 1
                deadline = time.monotonic() + await asyncio.to_thread(dlx_timer, node) + 5
            await asyncio.sleep(0.5)
        await asyncio.sleep(2)  # a duplicate, if any, has every chance to show up
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)
        topology = app.topology()
        depths = {
            name: await queue_depth(connection, name)
            for name in [*(level.name for level in topology.ladder.levels),
                         *(q.name for q in topology.queues)]
        }  # fmt: skip
        left = "queues at the end: " + ", ".join(f"{n} {d}" for n, d in depths.items() if d)
        log = (workdir / "worker.log").read_text(errors="replace").splitlines()
        left += "\nworker log (last 40 lines):\n" + "\n".join(log[-40:])
        kept = await asyncio.to_thread(held_by_broker, node, app)
        left += f"\nheld by the broker in the ladder: {kept}"
        leftover = sum(depths[level.name] for level in topology.ladder.levels) + kept
        assert leftover == 0, f"{leftover} message(s) still in the ladder\n{left}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        await delete_app_objects(connection, app)
        await connection.close()
    seen = arrivals(ledger)
    fresh = Counter(a.message_id for a in seen if not a.redelivered)
    first: dict[str, float] = {}
    quiet: list[float] = []
    after: list[float] = []
    early = 0
    for a in seen:
        early += a.started < a.due
        if a.message_id not in first:
            first[a.message_id] = a.started - a.due
            if a.due < killed:
                quiet.append(a.started - a.due)
            elif a.due > up + 10:
                after.append(a.started - a.due)
    return DelayResult(
        published=len(published),
        unconfirmed=unconfirmed,
        lost=len(published - set(first)),
        ladder_duplicates=sum(n - 1 for n in fresh.values() if n > 1),
        redeliveries=len(seen) - len(first),
        early=early,
        lateness=[first[m] for m in published if m in first],
        quiet=quiet,
        after=after,
        seconds=time.monotonic() - began,
        left=left,
        held=held,
        held_late=max((a.started - held_seen for a in seen), default=0.0) if held else 0.0,
        twice=[
            f"{mid}: "
            + ", ".join(
                f"{a.started - killed:+.2f}s from the kill, {a.started - down:+.2f}s from stop_app "
                f"(up {up - down:.1f}s later), due {a.due - a.started:+.2f}s, pid {a.pid}, "
                f"redelivered {a.redelivered}"
                for a in seen
                if a.message_id == mid
            )
            for mid, n in Counter(a.message_id for a in seen).items()
            if n > 1
        ],
    )


@pytest.mark.slow
@pytest.mark.timeout(300)  # 150 s, and a few of the node's 10 s dead-letter cycles
async def test_delayed_messages_arrive_once_and_never_early_through_a_worker_kill_and_a_broker_restart(  # noqa: E501
    delay_node, tmp_path
):
    result = await delays_under_faults(delay_node, tmp_path, messages=2000, max_delay=60)
    assert dlx_timer(delay_node) == DLX_TIMER_MS / 1000  # still set after the restart
    print(result.summary())
    print("\n".join(result.twice))
    assert result.published == 2000 and result.lost == 0, result.summary()
    assert result.early == 0, result.summary()
    # At-least-once, as everything in rabbitq: a restart may hand a message over twice
    # (a delivery whose ack the stopping broker never read; a hop the ladder's
    # at-least-once dead-lettering sends again). Counted and reported, never a flood:
    # at most 3%. Each duplicate has its message's id, so an idempotent handler sees it
    # once. (1% held in quiet runs; a full parallel suite without reruns measured 35 of
    # 2,000: 16 hops sent again while the restarted broker was slow to confirm, with the
    # 10 s dead-letter timer this node runs, and 19 redeliveries of unacked deliveries.)
    assert result.ladder_duplicates + result.redeliveries <= 2000 * 3 // 100, result.summary()
    assert result.lateness and len(ladder.hops(ladder.MAX_UNITS)) == ladder.LEVELS


if __name__ == "__main__":  # python -m tests.chaos.test_delays [MESSAGES] [MAX_DELAY]

    async def main() -> None:
        import tempfile

        count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
        spread = float(sys.argv[2]) if len(sys.argv) > 2 else 120.0
        with (
            BrokerNode.started("rabbitq-delays", advanced=ADVANCED) as node,
            tempfile.TemporaryDirectory() as tmp,
        ):
            print(
                (
                    await delays_under_faults(node, Path(tmp), messages=count, max_delay=spread)
                ).summary()
            )

    asyncio.run(main())
