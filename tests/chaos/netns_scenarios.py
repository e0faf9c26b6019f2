"""Real network partitions of a 3-node cluster (tests/netns_cluster.py), under load.

One scenario: three ``rabbitq worker tests.chaos.netns_service:app`` processes, each
given all three node addresses, and a publisher given all three (``retry_for``). The
schedule's leader is found (the node of its exclusive lease queue) and *its* node is the
one cut, so the leader sits on the minority side. Kinds of cut:

- ``peers``: the node loses both peers for ``seconds`` (clients still reach it);
- ``partial``: the node and one other lose each other, the third sees both;
- ``isolated``: the node loses its peers and every client (the root namespace).

Then the cut heals, the cluster is waited for (a paused minority restarts), and every
confirmed message is accounted for: handled (the ledger), in the DLQ, still in one of
the app's queues when the workers stop (``pending``, with the queue), or held by the
broker (in a queue's ``messages`` but neither ready nor unacked: a quorum queue's
at-least-once dead-letter hold, up to 180 s on 3.10). While any is held, the run waits
(up to ``hold_limit``) and records which queue held the ones that were missing; what
is nowhere at the end is lost. Effects are counted in PostgreSQL (one row per key
expected, none for refused keys) and the schedule's ticks on a queue of the test's own
(every second from the first tick to the last, none twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import aio_pika
import psycopg

from rabbitq import PublishError

from ..helpers import declare_topology, delete_app_objects, drain_queue, spawn_logged
from ..netns_cluster import NetnsCluster, NetnsNode
from . import netns_service
from .harness import DeadLetterCollector, connect_admin
from .ledger import Ledger

ROOT = Path(__file__).resolve().parents[2]
Kind = Literal["peers", "partial", "isolated"]


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: Kind
    seconds: float


SCENARIOS = (
    Scenario("one node cut from its peers for 10 s", "peers", 10),
    Scenario("one node cut from its peers for 30 s", "peers", 30),
    Scenario("partial: two nodes lose each other for 30 s, the third sees both", "partial", 30),
    Scenario("one node cut from its peers and every client for 30 s", "isolated", 30),
)
LEADER_PARTIAL = Scenario(
    "partial: the schedule leader's node and one other lose each other for 40 s, the third "
    "sees both",
    "partial",
    40,
)
"""Issue 40's first finding: two leaders, each with its side's exclusive lease, for ever."""


@dataclass
class Report:
    """What happened to every message and tick of one scenario."""

    scenario: Scenario
    confirmed: set[str]
    unconfirmed: set[str]
    handled: Counter[str]
    dead: Counter[str]
    dlq_reasons: Counter[str]
    effects: Counter[str]
    pending: dict[str, str]
    """Confirmed ids found in one of the app's queues after the workers stopped: queue."""
    where: dict[str, str]
    """Confirmed ids missing once the run went quiet, and where they were found."""
    ticks: Counter[str]
    slots: int
    missing_ticks: list[str]
    seconds: float
    notes: list[str] = field(default_factory=list)
    tick_times: dict[str, datetime] = field(default_factory=dict)
    """Each tick's ``message_id``: the tick's instant."""
    cut_wall: datetime | None = None
    healed_wall: datetime | None = None
    """When the cut began and was healed (wall clock, as the ticks' instants)."""

    def doubled_after(self, instant: datetime) -> list[str]:
        """Ticks published twice whose instant is after ``instant``."""
        return [t for t in self.doubled_ticks if self.tick_times[t] > instant]

    @property
    def lost(self) -> set[str]:
        return self.confirmed - set(self.handled) - set(self.dead) - set(self.pending)

    @property
    def duplicates(self) -> int:
        """Handlings beyond one per message (a handler that ran twice, or ran and was
        dead-lettered too)."""
        return sum(self.handled[m] + self.dead[m] - 1 for m in set(self.handled) | set(self.dead))

    def expected_effect(self, mid: str) -> bool:
        return not netns_service.refused(int(mid.rsplit("-", 1)[1]))

    @property
    def effect_keys(self) -> list[str]:
        """Confirmed keys that must have exactly one effect row."""
        return [m for m in self.confirmed if self.expected_effect(m)]

    @property
    def effects_once(self) -> int:
        return sum(1 for m in self.effect_keys if self.effects[m] == 1)

    @property
    def effects_wrong(self) -> list[str]:
        """Keys with a number of effect rows other than expected (1, or 0 if refused)."""
        wrong = [m for m in self.effect_keys if self.effects[m] != 1]
        wrong += [m for m in self.effects if not self.expected_effect(m) and self.effects[m]]
        return wrong

    @property
    def doubled_ticks(self) -> list[str]:
        return [t for t, n in self.ticks.items() if n > 1]

    @property
    def held(self) -> int:
        return sum(1 for place in self.where.values() if place.startswith("held"))

    def line(self) -> str:
        return (
            f"{self.scenario.name}: confirmed {len(self.confirmed)} (unconfirmed "
            f"{len(self.unconfirmed)}), handled {len(set(self.handled) & self.confirmed)}, "
            f"DLQ {len(set(self.dead) & self.confirmed)} {dict(self.dlq_reasons)}, "
            f"held by broker {self.held}, pending {len(self.pending)}, "
            f"lost {len(self.lost)}, duplicates {self.duplicates}, effects once "
            f"{self.effects_once} of {len(self.effect_keys)} (wrong {len(self.effects_wrong)}); "
            f"schedule {self.slots} slots, missed {len(self.missing_ticks)}, doubled "
            f"{len(self.doubled_ticks)}; {self.seconds:.0f} s"
        )


class Worker:
    """One ``rabbitq worker`` process of the scenario's service."""

    def __init__(self, url: str, env: dict[str, str], log: Path) -> None:
        self.log = log
        self.proc = spawn_logged(
            [sys.executable, "-m", "rabbitq", "worker", "tests.chaos.netns_service:app",
             "--url", url, "--grace-period", "5", "--log-level", "INFO"],
            log, cwd=ROOT, env=env,
        )  # fmt: skip

    def leads(self) -> bool:
        """Whether its log says it leads the schedules now."""
        lines = self.log.read_text(errors="replace").splitlines()
        said = [line for line in lines if "leading the schedules of" in line]
        return bool(said) and "stopped leading" not in said[-1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except Exception:
            self.proc.kill()
            self.proc.wait(timeout=10)


async def _ctl(cluster: NetnsCluster, *args: str, avoid: tuple[NetnsNode, ...] = ()) -> str:
    return await asyncio.to_thread(cluster.ctl, *args, avoid=avoid)


async def depths(
    cluster: NetnsCluster, queue: str, avoid: tuple[NetnsNode, ...] = ()
) -> dict[str, tuple[int, int, int]]:
    """``messages``, ready and unacked of each of the app's queues (a node that answers)."""
    out = await _ctl(cluster, "list_queues", "-q", "--no-table-headers", "name", "messages",
                     "messages_ready", "messages_unacknowledged", avoid=avoid)  # fmt: skip
    rows = [line.split("\t") for line in out.splitlines()]
    return {
        r[0]: (int(r[1]), int(r[2]), int(r[3]))
        for r in rows
        if len(r) == 4 and (r[0] == queue or r[0].startswith(queue + ".")) and r[1].isdigit()
    }


async def run(
    cluster: NetnsCluster,
    workdir: Path,
    scenario: Scenario,
    *,
    messages: int = 600,
    publish_seconds: float = 25.0,
    cut_after: float = 5.0,
    hold_limit: float = 240.0,
    touch_after: float | None = 20.0,
    pg_url: str = netns_service.PG,
) -> Report:
    """One scenario. Messages the broker holds are waited for up to ``hold_limit``
    seconds after the heal; ``touch_after`` seconds after the first was seen held, the
    holding queues get the remedy ``rabbitq doctor`` gives (a policy set and cleared,
    which makes the dead-letter process look up its target again); ``None``: no touch,
    the broker's own timer (180 s on 3.10) releases them."""
    started = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    queue, exchange, prefix = f"netns.{tag}", f"netns.{tag}.x", f"t_netns_{tag}_"
    ledger = Ledger(workdir / f"handled-{tag}.log")
    app = netns_service.build_app(
        queue=queue, exchange=exchange, prefix=prefix, ledger=str(ledger.path), url=cluster.url
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RABBITQ_URL", None)
    env.update(
        netns_service.environment(
            queue=queue, exchange=exchange, prefix=prefix, ledger=str(ledger.path), pg=pg_url
        )
    )
    notes: list[str] = []
    marks = {node.name: node.log_mark() for node in cluster.nodes}
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as pg:
        await pg.execute(
            f"CREATE TABLE {prefix}effects (id bigserial, key text, message_id text, pid int)"
        )
    admin = await connect_admin(cluster.url)
    workers: list[Worker] = []
    try:
        await declare_topology(admin, app)
        channel = await admin.channel()
        ticks_queue = f"{queue}.ticks"
        ex = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        counted = await channel.declare_queue(
            ticks_queue, durable=True, arguments={"x-queue-type": "quorum"}
        )
        await counted.bind(ex, "netns.tick")
        collector = DeadLetterCollector()
        dlq = await channel.declare_queue(app.topology().dlq.name, passive=True)
        await dlq.consume(collector.on_message)
        workers = [Worker(cluster.url, env, workdir / f"worker-{tag}-{i}.log") for i in (1, 2, 3)]

        # The node cut is the main queue's leader (queues are led by the node their
        # declaring connection is on); the schedule's leader is brought onto it (the node
        # of its exclusive lease queue): a leading worker elsewhere is stopped and
        # replaced, so that a scheduler on another node takes the lease, until it lands.
        victim = await asyncio.to_thread(cluster.leader, queue)
        if victim is None:
            raise RuntimeError(f"no leader for {queue}")
        lease = f"{queue}.schedules.lease"
        moves = 0
        deadline = time.monotonic() + 150
        while True:
            leader_at = await asyncio.to_thread(cluster.node_of_queue_pid, lease)
            if leader_at is victim or time.monotonic() > deadline:
                break
            if leader_at is not None:
                leading = [w for w in workers if w.proc.poll() is None and w.leads()]
                if leading:
                    await asyncio.to_thread(leading[0].stop)
                    workers.remove(leading[0])
                    moves += 1
                    log = workdir / f"worker-{tag}-{moves + 3}.log"
                    workers.append(Worker(cluster.url, env, log))
            await asyncio.sleep(1)
        if leader_at is None:
            raise RuntimeError(f"no schedule leader; see {workdir}")
        await asyncio.sleep(2)  # a few ticks before the publishing starts
        others = cluster.others(victim)
        notes.append(
            f"main queue leader {victim.name}; schedule leader on {leader_at.name} "
            f"(after {moves} worker(s) replaced); cut {victim.name}"
            + (f" and {others[0].name} from each other" if scenario.kind == "partial" else "")
        )

        confirmed: set[str] = set()
        unconfirmed: set[str] = set()

        async def publish_all() -> None:
            async with app.publisher(retry_for=90) as pub:
                pending: set[asyncio.Task[None]] = set()
                for n in range(1, messages + 1):
                    mid = f"{tag}-{n}"
                    pending.add(asyncio.create_task(one(pub, mid, n)))
                    if len(pending) >= 32:
                        _, pending = await asyncio.wait(
                            pending, return_when=asyncio.FIRST_COMPLETED
                        )
                    await asyncio.sleep(publish_seconds / messages)
                if pending:
                    await asyncio.wait(pending)

        async def one(pub: object, mid: str, n: int) -> None:
            try:
                await pub.publish(netns_service.Order(n=n, key=mid), message_id=mid)  # type: ignore[attr-defined]
            except PublishError as exc:
                unconfirmed.add(mid)
                notes.append(f"publish of {mid} raised {type(exc).__name__}: {exc}"[:200])
            else:
                confirmed.add(mid)

        publishing = asyncio.create_task(publish_all())
        await asyncio.sleep(cut_after)
        cut_at = time.monotonic()
        cut_wall = datetime.now(UTC)
        if scenario.kind == "partial":
            await asyncio.to_thread(cluster.drop_between, victim, [others[0]])
        else:
            await asyncio.to_thread(cluster.cut, victim, clients=scenario.kind == "isolated")
        await asyncio.sleep(scenario.seconds)
        await asyncio.to_thread(cluster.heal)
        healed_at = time.monotonic()
        healed_wall = datetime.now(UTC)
        await publishing
        published_at = time.monotonic()
        nudged = await asyncio.to_thread(cluster.await_whole, 300)
        notes.extend(nudged)
        notes.append(
            f"cut at +{cut_at - started:.0f} s for {scenario.seconds:.0f} s; publishing "
            f"ended {published_at - healed_at:.1f} s after the heal; cluster whole again "
            f"{time.monotonic() - healed_at:.1f} s after it"
        )

        # Settle: every confirmed message handled or dead-lettered, or, once nothing
        # moves, found where the broker keeps it.
        where: dict[str, str] = {}
        first_seen: dict[str, float] = {}
        last_done, quiet_since = -1, time.monotonic()
        look_at = 0.0
        held_since: float | None = None
        touched: float | None = None
        while True:
            handled = ledger.handled()
            missing = confirmed - set(handled) - set(collector.dead)
            now = time.monotonic()
            if not missing:
                break
            done = len(handled) + len(collector.dead)
            if done != last_done:
                last_done, quiet_since = done, now
            if now - quiet_since > 10 and now >= look_at:
                look_at = now + 5
                held = {
                    name: d for name, d in (await depths(cluster, queue)).items()
                    if d[0] - d[1] - d[2] > 0
                }  # fmt: skip
                moving = {name: d for name, d in (await depths(cluster, queue)).items()
                          if d[1] or d[2]}  # fmt: skip
                for mid in missing:
                    first_seen.setdefault(mid, now)
                    if held and mid not in where:
                        where[mid] = "held by the broker in " + ", ".join(
                            f"{name} ({'/'.join(map(str, d))} messages/ready/unacked)"
                            for name, d in held.items()
                        )
                if held and held_since is None:
                    held_since = now
                if (
                    held
                    and held_since is not None
                    and touch_after is not None
                    and touched is None
                    and now - held_since >= touch_after
                ):
                    for name in held:
                        await asyncio.to_thread(touch, cluster, name)
                    touched = time.monotonic()
                    notes.append(
                        f"held by the broker {now - healed_at:.0f} s after the heal: "
                        + ", ".join(f"{n} {d[0] - d[1] - d[2]}" for n, d in held.items())
                        + f"; touched with a policy {now - held_since:.0f} s after first seen"
                    )
                if not held and not moving and now - quiet_since > 20:
                    break  # nothing held, nothing queued, nothing moving: done
            if now - healed_at > hold_limit:
                notes.append(f"gave up waiting {hold_limit:.0f} s after the heal")
                break
            await asyncio.sleep(1)
        for mid, seen in first_seen.items():
            if mid in ledger.handled() or mid in collector.dead:
                place = where.get(mid, "late")
                how = "" if touched is None else f" (policy touch at +{touched - seen:.0f} s)"
                where[mid] = f"{place}; arrived {time.monotonic() - seen:.0f} s or less later{how}"
        settled_at = time.monotonic()
        notes.append(f"settled {settled_at - healed_at:.1f} s after the heal")

        for worker in workers:
            await asyncio.to_thread(worker.stop)
        await asyncio.sleep(1)  # the collector's last deliveries
        handled = ledger.handled()
        accounted = set(handled) | set(collector.dead)
        pending: dict[str, str] = {}
        for spec in app.topology().queues[:-1]:  # not the DLQ
            for message in await drain_queue(admin, spec.name):
                mid = message.message_id or "(none)"
                if mid in accounted:
                    handled[mid] += 1  # a redelivery that would have run again
                else:
                    pending[mid] = spec.name
        for mid in set(pending) & confirmed:
            where[mid] = f"still in {pending[mid]} when the workers stopped"
        final_depths = await depths(cluster, queue)
        still_held = {n: d for n, d in final_depths.items() if d[0] - d[1] - d[2] > 0}
        for mid in confirmed - accounted - set(pending):
            if still_held and mid in where:
                where[mid] += "; still held at the end"
                continue
            where[mid] = "nowhere: " + (
                ", ".join(f"{n} {'/'.join(map(str, d))}" for n, d in final_depths.items() if d[0])
                or "every queue of the app empty"
            )

        ticks: Counter[str] = Counter()
        instants: set[datetime] = set()
        tick_times: dict[str, datetime] = {}
        for message in await drain_queue(admin, ticks_queue):
            ticks[message.message_id or "(none)"] += 1
            instant = datetime.fromisoformat(str((message.headers or {})["rabbitq-tick"]))
            instants.add(instant)
            tick_times[message.message_id or "(none)"] = instant
        first, last = min(instants), max(instants)
        slots = int((last - first).total_seconds()) + 1
        expected = {first + timedelta(seconds=s) for s in range(slots)}
        missing_ticks = sorted(t.isoformat() for t in expected - instants)
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as pg:
            cur = await pg.execute(f"SELECT key, count(*) FROM {prefix}effects GROUP BY key")
            effects = Counter({key: n for key, n in await cur.fetchall()})
        takeovers = sum(
            w.log.read_text(errors="replace").count("leading the schedules of") for w in workers
        )
        notes.append(f"schedule takeovers: {takeovers}")
        for node in cluster.nodes:
            paused = node.log_lines(
                "minority", "Partial partition", "partition detected", since=marks[node.name]
            )
            if paused:
                notes.append(f"{node.name}'s log: {len(paused)} line(s) like {paused[0][-160:]}")
        return Report(
            scenario=scenario,
            confirmed=confirmed,
            unconfirmed=unconfirmed,
            handled=handled,
            dead=Counter(collector.dead),
            dlq_reasons=Counter(collector.reasons),
            effects=effects,
            pending=pending,
            where=where,
            ticks=ticks,
            slots=slots,
            missing_ticks=missing_ticks,
            seconds=time.monotonic() - started,
            notes=notes,
            tick_times=tick_times,
            cut_wall=cut_wall,
            healed_wall=healed_wall,
        )
    finally:
        for worker in workers:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(worker.stop)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(cluster.heal)
        with contextlib.suppress(Exception):
            ch = await admin.channel()
            await ch.queue_delete(f"{queue}.ticks")
            await ch.queue_delete(f"{queue}.schedules")
        with contextlib.suppress(Exception):
            await delete_app_objects(admin, app)
        with contextlib.suppress(Exception):
            await admin.close()
        with contextlib.suppress(Exception):
            async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as pg:
                cur = await pg.execute(
                    "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (prefix + "%",)
                )
                for (name,) in await cur.fetchall():
                    await pg.execute(f'DROP TABLE IF EXISTS "{name}"')


def touch(cluster: NetnsCluster, queue: str) -> None:
    """``rabbitq doctor``'s remedy for dead letters the broker holds: a policy on the
    queue, set and cleared (the dead-letter process then looks up its target again)."""
    pattern = "^" + queue.replace(".", "\\.") + "$"
    cluster.ctl("set_policy", "rabbitq-touch", pattern, '{"max-length":1000000000}',
                "--apply-to", "queues")  # fmt: skip
    time.sleep(2)
    cluster.ctl("clear_policy", "rabbitq-touch")
