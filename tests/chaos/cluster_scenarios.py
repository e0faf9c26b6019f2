"""The cluster chaos scenario: a worker and a publisher under load on a 3-node RabbitMQ
cluster whose quorum queues are replicated on all three nodes, and ``kill -9`` of one
node: the one the worker is connected to, or (separately) the main queue's leader.

Every client is given all three addresses (``rabbitq._amqp.failover``): the worker, the
publisher (``retry_for``) and the test's own connection move to another node when theirs
dies. Counted as in the other scenarios (``harness.ChaosRun``): every confirmed message
handled or dead-lettered, duplicates reported; and the time from the kill until handling
resumed after its longest pause.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Literal

from ..broker_node import BrokerNode
from ..cluster import Cluster
from .harness import ChaosRun, WorkerProcess
from .scenarios import FLAKY, Result

Target = Literal["worker's node", "queue leader"]


async def kill_node(
    cluster: Cluster,
    workdir: Path,
    *,
    target: Target,
    messages: int = 3000,
    publish_seconds: float = 4.0,
) -> Result:
    """Publish two thirds of ``messages`` as a backlog, start one worker process (on a
    node that does not lead the queue), publish the rest over ``publish_seconds``
    (20% of attempts fail and are retried over 0.2/0.5/1 s tiers), ``kill -9`` the
    target node 1 s in, and let everything settle. A node killed by an earlier run is
    restarted first."""
    started = time.monotonic()
    healed = await asyncio.to_thread(cluster.heal)  # a node killed by the previous run
    config = replace(FLAKY, queue_type="quorum", handle_seconds=0.01, prefetch=16)
    async with ChaosRun(cluster.url, workdir, config) as run:
        queue = run.app.queue
        leader = await asyncio.to_thread(cluster.leader, queue)
        members = await asyncio.to_thread(cluster.members, queue)
        # A backlog first, so that the worker has work waiting when its node or the
        # leader goes: the pause then measures the consumer, not a lull in publishing.
        backlog = messages * 2 // 3
        await run.publish(backlog, concurrency=64)
        worker, node = await _worker_off(run, cluster, leader)
        rest = messages - backlog
        publishing = asyncio.create_task(
            run.publish(rest, retry_for=60, concurrency=16, rate=rest / publish_seconds)
        )
        await asyncio.sleep(1.0)
        victim = node if target == "worker's node" else leader
        moment = await asyncio.to_thread(cluster.kill, victim)
        waiting = len(run.published) - len(set(run.ledger.handled()))
        await publishing
        await _settle(run)
        resumed = _resumed_after_pause([t for t, _, _ in run.ledger.entries()], moment)
        new_leader = await asyncio.to_thread(cluster.leader, queue)
        tally = await run.finish(timeout=5)
        worker_alive = worker.proc.returncode in (None, 0)
        # What the broker still holds: a quorum queue counts the messages it has
        # dead-lettered (at-least-once) but not yet handed on in `messages`, not in
        # `ready` or `unacked`, and no consumer can reach them.
        depths = await asyncio.to_thread(_depths, cluster, queue)
        stuck = sum(total - ready - unacked for total, ready, unacked in depths.values())
    return Result(
        f"3-node cluster: kill -9 of the {target}",
        "quorum",
        messages,
        f"kill -9 of {victim.name} ({'leader' if victim is leader else 'follower'}) under load",
        tally,
        [resumed],
        time.monotonic() - started,
        [f"replicas: {members}; leader before {leader.name}, after {new_leader.name}",
         f"worker connected to {node.name}; it "
         f"{'survived (exit 0 on SIGTERM)' if worker_alive else 'exited: see worker.log'}",
         f"messages waiting (published, not yet handled) at the kill: about {waiting}",
         f"nodes restarted before the run: {healed or 'none'}",
         f"stuck in the broker's dead-letter buffers at the end: {stuck}"
         + "".join(f"; {name} {'/'.join(map(str, d))} (messages/ready/unacked)"
                   for name, d in depths.items() if d[0])],
    )  # fmt: skip


async def _worker_off(
    run: ChaosRun, cluster: Cluster, leader: BrokerNode, tries: int = 8
) -> tuple[WorkerProcess, BrokerNode]:
    """A worker process connected to a node that is not the queue's leader, so that the
    two faults (the worker's node, the leader) are measured apart. The worker's shuffled
    address list picks the node; one on the leader is stopped and another started."""
    name = f"rabbitq worker {run.app.queue}"
    for _ in range(tries):
        worker = run.spawn()
        node = None
        deadline = time.monotonic() + 30
        while node is None and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
            node = await asyncio.to_thread(cluster.node_of_connection, name)
        if node is None:
            raise RuntimeError(f"the worker did not connect; see {worker.log}")
        if node is not leader:
            return worker, node
        await asyncio.to_thread(worker.terminate)
        while await asyncio.to_thread(cluster.node_of_connection, name) is not None:
            await asyncio.sleep(0.2)
    raise RuntimeError(f"the worker connected to the leader {tries} times in a row")


async def _settle(run: ChaosRun, quiet: float = 10, limit: float = 90) -> None:
    """Wait until every message is accounted for, or nothing has moved for ``quiet``
    seconds (messages stuck in a broker's dead-letter buffer never arrive)."""
    deadline = time.monotonic() + limit
    seen, since = -1, time.monotonic()
    while not run.accounted() and time.monotonic() < deadline:
        done = len(run.ledger.entries()) + run.dead_letters.dead.total()
        if done != seen:
            seen, since = done, time.monotonic()
        elif time.monotonic() - since > quiet:
            return
        await asyncio.sleep(0.5)


def _depths(cluster: Cluster, queue: str) -> dict[str, tuple[int, int, int]]:
    """messages, ready and unacked of each of the app's queues."""
    out = cluster.ctl("list_queues", "-q", "--no-table-headers", "name", "messages",
                      "messages_ready", "messages_unacknowledged")  # fmt: skip
    rows = [line.split("\t") for line in out.splitlines()]
    return {
        r[0]: (int(r[1]), int(r[2]), int(r[3]))
        for r in rows
        if len(r) == 4 and (r[0] == queue or r[0].startswith(queue + ".")) and r[1].isdigit()
    }


def stuck_of(result: Result) -> int:
    """How many messages the broker held in dead-letter buffers at the end of a run."""
    note = next(n for n in result.notes if n.startswith("stuck in the broker"))
    return int(note.split(": ", 1)[1].split(";", 1)[0])


def _resumed_after_pause(starts: list[float], moment: float, window: float = 60) -> float:
    """Seconds from ``moment`` until handling resumed after its longest pause within
    ``window`` seconds (from the handlers' start times in the ledger).

    Deliveries already prefetched keep handlers busy for a moment after a kill, so the
    first handler after the kill says little; the longest silence after it is the stall.
    """
    after = [moment, *sorted(t for t in starts if moment < t <= moment + window)]
    if len(after) < 2:
        return float("nan")
    _, end = max((later - earlier, later) for earlier, later in zip(after, after[1:], strict=False))
    return end - moment
