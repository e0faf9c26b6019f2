"""The loss paths of issue 11, as scenarios: each publishes counted messages, injects one
hostile condition (a foreign header, a deleted queue, a policy, an alarm, hung handlers)
against a private node, and tallies every message (handled or in the DLQ, exactly once;
duplicates counted). ``tests/chaos/test_loss_paths.py`` runs them with small counts,
``scripts/reliability.py`` with the counts in ``docs/reliability.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import aio_pika
import aiormq
from prometheus_client import CollectorRegistry

from rabbitq import App, Context, Hooks, Message, PublishError, RetryPolicy, Worker
from rabbitq import dlq as dlq_lib
from rabbitq._amqp.topology import dlq_arguments
from rabbitq._ops.metrics import Metrics
from rabbitq.dlq.message import reason_of
from rabbitq.errors import DlqError

from ..broker_node import BrokerNode
from ..helpers import declare_topology, delete_app_objects, queue_depth, running, wait_for
from .harness import ChaosRun, DeadLetterCollector
from .ledger import Tally
from .scenarios import Result
from .service import Config, Job


def broker_log(node: BrokerNode) -> str:
    """Everything the node has logged so far."""
    return "\n".join(p.read_text(errors="replace") for p in (node.base / "log").glob("*.log"))


def log_count(node: BrokerNode, needle: str) -> int:
    return broker_log(node).count(needle)


async def publish_with(
    run: ChaosRun, count: int, *, headers: dict[str, Any] | None = None, **fields: Any
) -> list[str]:
    """Publish ``count`` jobs with ``headers``; confirmed ids go to ``run.published``."""
    ids: list[str] = []
    async with run.app.publisher() as pub:
        for _ in range(count):
            run._count += 1
            mid = f"{run.tag}-{run._count}"
            try:
                await pub.publish(Job(n=run._count, **fields), message_id=mid, headers=headers)
            except PublishError:
                run.unconfirmed.add(mid)
            else:
                run.published.add(mid)
                ids.append(mid)
    return ids


async def foreign_x_death(
    node: BrokerNode,
    workdir: Path,
    *,
    queue_type: str,
    messages: int = 50,
    settle: float = 20,
) -> Result:
    """Messages arriving with an ``x-death`` that names our main queue (a replayed
    broker-dead-lettered message, or another system's dead-lettering) fail once: their
    retry copy must come back from the retry queue and be handled, not be dropped by
    the broker as a dead-letter cycle."""
    started = time.monotonic()
    config = replace(Config(delays="0.2"), queue_type=queue_type, prefetch=16)
    cycles_before = log_count(node, "cycle detected")
    async with ChaosRun(node.url, workdir, config) as run:
        death = {
            "queue": run.config.queue,
            "reason": "delivery_limit" if queue_type == "quorum" else "expired",
            "count": 1,
            "exchange": "",
            "routing-keys": [run.config.queue],
        }
        await publish_with(run, messages, headers={"x-death": [death]}, fail_times=1)
        async with running(Worker(run.app, grace_period=5)):
            await run.settle(timeout=settle)
        tally = await run.tally()
    cycles = log_count(node, "cycle detected") - cycles_before
    return Result(
        "a message arriving with an x-death naming its queue fails once",
        queue_type,
        messages,
        f"{messages} x x-death [{death['reason']} in the main queue]",
        tally,
        seconds=time.monotonic() - started,
        notes=[f"broker log 'cycle detected': {cycles}"],
    )


async def malformed_x_death(
    node: BrokerNode,
    workdir: Path,
    *,
    queue_type: str,
    foreign: int = 1,
    messages: int = 50,
    settle: float = 20,
) -> Result:
    """``foreign`` messages with ``x-death: ["garbage"]`` among ``messages`` ordinary ones,
    all failing once: every retry must come back from the retry queue."""
    started = time.monotonic()
    config = replace(Config(delays="0.2"), queue_type=queue_type, prefetch=16)
    crashes_before = log_count(node, "Generic server")
    async with ChaosRun(node.url, workdir, config) as run:
        await publish_with(run, foreign, headers={"x-death": ["garbage"]}, fail_times=1)
        await asyncio.sleep(0.1)
        await publish_with(run, messages, fail_times=1)
        async with running(Worker(run.app, grace_period=5)):
            await run.settle(timeout=settle)
        tally = await run.tally()
    crashes = log_count(node, "Generic server") - crashes_before
    return Result(
        'one foreign message with x-death ["garbage"] among ordinary ones, all failing once',
        queue_type,
        foreign + messages,
        f"{foreign} x malformed x-death",
        tally,
        seconds=time.monotonic() - started,
        notes=[f"broker log 'Generic server terminating': {crashes}"],
    )


async def dlq_reads(
    node: BrokerNode,
    *,
    queue_type: str,
    arguments: dict[str, Any] | None = None,
    messages: int = 20,
    reads: int = 30,
) -> Result:
    """``reads`` x ``rabbitq dlq list`` (every third one ``dlq show``) of a DLQ holding
    ``messages`` dead letters: the DLQ must still hold every one. ``arguments`` replaces
    the DLQ's declared arguments (to measure other choices)."""
    started = time.monotonic()
    args = dlq_arguments(queue_type) if arguments is None else arguments  # type: ignore[arg-type]
    name = f"chaos.{uuid.uuid4().hex[:8]}.dlq"
    connection = await aio_pika.connect(node.url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(name, durable=True, arguments=args)
        ids = [f"{name}-{n}" for n in range(messages)]
        for mid in ids:
            body = aio_pika.Message(b'{"n": 1}', message_id=mid, type="chaos.job")
            await channel.default_exchange.publish(body, routing_key=name, mandatory=True)
        seen: list[int] = []
        for i in range(reads):
            if i % 3 == 2:
                with contextlib.suppress(DlqError):
                    seen.append(len(await dlq_lib.show(name, ids[0], url=node.url)))
            else:
                seen.append(len(await dlq_lib.list_messages(name, url=node.url)))
        left = {m.message_id or "" for m in await dlq_lib.list_messages(name, url=node.url)}
        await channel.queue_delete(name)
    finally:
        await connection.close()
    tally = Tally(published=set(ids), handled=Counter(), dead=Counter(dict.fromkeys(left, 1)))
    return Result(
        f"{reads} reads (dlq list/show) of a DLQ with {args}",
        queue_type,
        messages,
        f"{reads} x dlq list/show",
        tally,
        seconds=time.monotonic() - started,
        notes=[f"messages found by the reads: {seen[0]} first, {seen[-1]} last"],
    )


async def same_id_publishes(node: BrokerNode, *, queue_type: str, pairs: int = 100) -> Result:
    """``pairs`` x two concurrent publishes with one ``message_id`` on one channel (as the
    worker's copies and a retrying producer make them): one to an existing queue, one
    to a queue that does not exist (unroutable). Each must get its own answer: the
    routable one confirmed, the unroutable one raising Unroutable."""
    from pamqp.commands import Basic

    from rabbitq._amqp.confirm import send_confirmed
    from rabbitq._amqp.topology import plan
    from rabbitq.errors import Unroutable

    started = time.monotonic()
    name = f"chaos.{uuid.uuid4().hex[:8]}"
    args = dict(plan(queue=name, exchange="x", delays_ms=(), routing_keys=(),
                     queue_type=queue_type).main.arguments)  # type: ignore[arg-type]  # fmt: skip
    connection = await aio_pika.connect_robust(node.url)
    wrong: list[str] = []
    stored: Counter[str] = Counter()
    try:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        await channel.declare_queue(name, durable=True, arguments=args)

        async def one(mid: str, target: str) -> None:
            props = Basic.Properties(message_id=mid, delivery_mode=2)
            try:
                await send_confirmed(channel, "", target, b"{}", props)
            except Unroutable:
                if target == name:
                    wrong.append(f"{mid}: routable reported unroutable")
            else:
                if target != name:
                    wrong.append(f"{mid}: unroutable reported confirmed")

        ids = [f"{name}-{n}" for n in range(pairs)]
        # Half the pairs send the unroutable one first: the order in which aiormq's
        # id lookup charges a return to the wrong publish.
        orders = [(name + ".missing", name), (name, name + ".missing")]
        await asyncio.gather(*(one(m, t) for i, m in enumerate(ids) for t in orders[i % 2]))
        queue = await channel.declare_queue(name, passive=True)
        while (message := await queue.get(fail=False, no_ack=True)) is not None:
            stored[message.message_id or ""] += 1
        await channel.queue_delete(name)
    finally:
        await connection.close()
    tally = Tally(published=set(ids), handled=stored, dead=Counter())
    return Result(
        "two publishes with one message_id in flight, one unroutable",
        queue_type,
        pairs,
        f"{pairs} x (routable + unroutable) with one id, concurrently",
        tally,
        seconds=time.monotonic() - started,
        notes=[f"publishes answered wrongly: {len(wrong)}"],
    )


class Counts(Hooks):
    """Every hook event an in-process worker reports, counted by name."""

    def __init__(self) -> None:
        self.events: Counter[str] = Counter()

    def received(self, queue: str, type_name: str) -> None:
        self.events["received"] += 1

    def retried(self, queue: str, type_name: str, delay: str, duration: float) -> None:
        self.events["retried"] += 1

    def dead_lettered(self, queue: str, type_name: str, reason: str, duration: float) -> None:
        self.events["dead_lettered"] += 1

    def requeued(self, queue: str, type_name: str) -> None:
        self.events["requeued"] += 1


async def collect_when_declared(run: ChaosRun, limit: float = 30) -> bool:
    """Consume the DLQ again once it exists again (the worker re-declares it).

    A quorum DLQ declared again a moment ago may not take a consumer yet: RabbitMQ 3.10
    then closes the whole connection with INTERNAL_ERROR (541) instead of answering the
    basic.consume (seen under load on a 2-core machine). The admin connection is robust:
    it reconnects, and the consume is tried again within the same limit."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            await run.collect()
            return True
        except aiormq.exceptions.ChannelNotFoundEntity:
            await asyncio.sleep(0.2)
        except aiormq.exceptions.ConnectionInternalError:
            await asyncio.sleep(0.2)
            await asyncio.wait_for(run.connection.ready(), deadline - time.monotonic())
    return False


async def deleted_queue(
    node: BrokerNode,
    workdir: Path,
    *,
    queue_type: str,
    which: str,
    messages: int = 40,
    settle: float = 20,
) -> Result:
    """One of the app's queues (``which``: main, retry, dlq) is deleted under a running
    worker. main: while every message waits in the retry queue (2 s); retry: before the
    messages fail once; dlq: before they fail permanently. Each message must be handled
    (or dead-lettered) once, after one run per attempt, with nothing returned to the
    queue to run again.

    main, classic: a retry copy that expires between the delete and the worker's
    re-declare is dropped by the broker (nowhere to dead-letter), so the copies must all
    be written shortly before the delete, and the re-declare must follow within the
    tier. The messages are published before the worker starts, so their first attempts
    fail in one burst (a sequential publish under the worker spread the copies over
    more than the tier on a slow machine); the 2 s tier leaves room for a slow machine
    and still loses every copy if the re-declare waited for a reconnect interval (2 s)."""
    started = time.monotonic()
    permanent = 1.0 if which == "dlq" else 0.0
    config = replace(
        Config(delays="2" if which == "main" else "0.2"),
        queue_type=queue_type,
        prefetch=16,
        permanent_rate=permanent,
    )
    counts = Counts()
    async with ChaosRun(node.url, workdir, config) as run:
        topology = run.app.topology()
        target = {"main": topology.main, "retry": topology.retries[0], "dlq": topology.dlq}[which]
        admin = await run.connection.channel()
        if which == "main":
            await publish_with(run, messages, fail_times=1)
        async with running(Worker(run.app, grace_period=5, hooks=counts)) as worker:
            # The DLQ is deleted under its collector, as under a `rabbitq dlq` reader:
            # RabbitMQ 3.10 sends no basic.cancel to the consumers of a quorum queue
            # declared again within milliseconds of its deletion, and they hold the new
            # queue's messages unacked, never delivered. The worker's re-declare, right
            # after the first unroutable copy, waits for the broker (Keeper.redeclare_wait)
            # so the collector is cancelled and consumes the new DLQ (collect_when_declared).
            if which != "main":
                await admin.queue_delete(target.name)
                await publish_with(run, messages, fail_times=0 if which == "dlq" else 1)
            if which == "main":
                await wait_for(lambda: counts.events["retried"] >= messages)
                await admin.queue_delete(target.name)
            if which == "dlq":
                await collect_when_declared(run)
            await run.settle(timeout=settle)
            redeclared = worker.keeper.redeclared
        tally = await run.tally()
    runs = counts.events["received"]
    return Result(
        f"{which} queue deleted under a running worker",
        queue_type,
        messages,
        f"queue_delete {target.name.split('.', 2)[-1] if which != 'main' else 'main'}",
        tally,
        seconds=time.monotonic() - started,
        notes=[f"handler runs: {runs} for {messages} messages"
               f" ({(1 if which == 'dlq' else 2) * messages} expected)",
               f"returned to the queue: {counts.events['requeued']}",
               f"topology re-declared: {redeclared}"],
    )  # fmt: skip


async def dlq_policy(
    node: BrokerNode,
    workdir: Path,
    *,
    queue_type: str,
    messages: int = 50,
    max_length: int = 10,
    settle: float = 30,
) -> Result:
    """An operator policy ``max-length`` on the DLQ while nobody reads it, and every
    message fails permanently: the DLQ fills; the dead letters beyond it must be held
    by the worker (not dropped, not requeued into the delivery limit) until the DLQ
    has room again (the policy cleared and the DLQ read)."""
    started = time.monotonic()
    config = replace(Config(), queue_type=queue_type, prefetch=16, permanent_rate=1.0)
    counts = Counts()
    metrics = Metrics(CollectorRegistry())
    policy = f"rabbitq-test-{uuid.uuid4().hex[:6]}"
    async with ChaosRun(node.url, workdir, config) as run:
        dlq = run.app.topology().dlq.name
        await run.stop_collecting()
        await asyncio.to_thread(
            node.ctl, "set_operator_policy", policy, f"^{re.escape(dlq)}$",
            json.dumps({"max-length": max_length}), "--apply-to", "queues",
        )  # fmt: skip
        try:
            await asyncio.sleep(1.0)  # the policy reaches the queue
            worker = Worker(run.app, grace_period=5, hooks=[counts, metrics])
            async with running(worker):
                await publish_with(run, messages)
                await asyncio.sleep(5)
                full = await queue_depth(run.connection, dlq)
                why = worker.health()
                await asyncio.to_thread(node.ctl, "clear_operator_policy", policy)
                await run.collect()
                await run.settle(timeout=settle)
            tally = await run.tally()
        finally:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(node.ctl, "clear_operator_policy", policy)
    return Result(
        f"operator policy max-length {max_length} on the DLQ",
        queue_type,
        messages,
        f"{messages} dead letters into a DLQ limited to {max_length}",
        tally,
        seconds=time.monotonic() - started,
        notes=[f"DLQ depth while limited: {full}",
               f"readiness while limited: {why}",
               f"returned to the queue: {counts.events['requeued']}"],
    )  # fmt: skip


def _get(url: str) -> tuple[int | None, str]:
    """Status and body of a GET (blocking; call in a thread)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return None, ""


async def memory_alarm(
    node: BrokerNode, workdir: Path, *, messages: int = 40, grace: float = 3.0
) -> Result:
    """A memory alarm (watermark 1e-7) while a worker process has messages that fail once:
    its retry copies are blocked. ``/readyz`` must say 503 "broker blocked", the gauge
    ``rabbitq_connection_blocked`` 1, a publish must give up at its deadline, and SIGTERM
    must stop the worker within its grace period (the unsettled deliveries go back).
    Then the alarm is cleared and a new worker handles every message."""
    started = time.monotonic()
    config = replace(Config(delays="0.2"), prefetch=8)
    async with ChaosRun(node.url, workdir, config) as run:
        await publish_with(run, messages, fail_times=1)
        try:
            await asyncio.to_thread(node.ctl, "set_vm_memory_high_watermark", "0.0000001")
            worker = run.spawn(grace_period=grace, metrics_port=0)  # a port it binds itself
            seen: tuple[int | None, str] = (None, "")
            gauge = ""
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                base = await asyncio.to_thread(worker.metrics_base)
                if base is None:  # not serving yet
                    await asyncio.sleep(0.3)
                    continue
                seen = await asyncio.to_thread(_get, base + "/readyz")
                _, text = await asyncio.to_thread(_get, base + "/metrics")
                gauge = next(
                    (ln for ln in text.splitlines() if ln.startswith("rabbitq_connection_blocked")),
                    "",
                )
                if seen[0] == 503 and "blocked" in seen[1] and gauge.endswith(" 1.0"):
                    break
                await asyncio.sleep(0.3)
            publish_outcome = await _publish_while_blocked(run)
            term = time.monotonic()
            code = await asyncio.to_thread(worker.terminate, 60)
            exit_s = time.monotonic() - term
        finally:
            await asyncio.to_thread(node.ctl, "set_vm_memory_high_watermark", "0.4")
        run.spawn()
        tally = await run.finish(timeout=30)
    return Result(
        "memory alarm (connection.blocked) while retry copies are written",
        "quorum",
        messages,
        "vm_memory_high_watermark 1e-7, then SIGTERM, then cleared",
        tally,
        seconds=time.monotonic() - started,
        notes=[f"/readyz while blocked: {seen[0]} {seen[1].strip()!r}",
               f"gauge: {gauge or 'absent'}",
               f"publish with a 2 s deadline while blocked: {publish_outcome}",
               f"SIGTERM while blocked: exit {code} after {exit_s:.1f} s (grace {grace:g} s)"],
    )  # fmt: skip


async def _publish_while_blocked(run: ChaosRun) -> str:
    """What a publish with a 2 s deadline does while the broker blocks publishers.

    A publish that gives up is counted as ``run.unconfirmed``, as every other failed
    publish of these scenarios: not promised, yet it may be stored. Here it is (measured
    on 3.10): RabbitMQ sends ``connection.blocked`` only once a connection publishes, so
    the frames are already in the broker's socket buffer and it reads and stores the
    message when the alarm clears. ``PublishInterrupted`` says "it may or may not have
    been stored"; only a publish that reports success is promised (``run.published``)."""
    mid = f"{run.tag}-blocked"
    try:
        publisher = run.app.publisher(timeout=2)  # type: ignore[call-arg]
    except TypeError:  # no deadline to give
        publisher = run.app.publisher()
    try:
        async with asyncio.timeout(15):
            async with publisher as pub:
                await pub.publish(Job(n=0), message_id=mid)
    except PublishError as exc:
        run.unconfirmed.add(mid)
        return type(exc).__name__
    except TimeoutError:
        run.unconfirmed.add(mid)
        return "still waiting after 15 s"
    run.published.add(mid)
    return "confirmed"


class Slow(Message, type="chaos.slow"):
    n: int
    hang: bool = False


async def hung_sync_handlers(
    node: BrokerNode, *, hanging: int = 2, healthy: int = 60, prefetch: int = 4
) -> Result:
    """A sync handler with a 0.5 s timeout; ``hanging`` messages block their thread until
    the end of the scenario (retried 3 times: 4 abandoned threads each), ``healthy``
    ones return at once. Every healthy message must be handled, none charged an
    attempt for a handler that never started."""
    started = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    app = App(queue=f"chaos.{tag}", exchange=f"chaos.{tag}.x", url=node.url,
              prefetch=prefetch, retry=RetryPolicy(delays=(0.2, 0.2, 0.2)))  # fmt: skip
    release = threading.Event()
    handled: Counter[str] = Counter()
    runs: Counter[str] = Counter()

    @app.handler(Slow, timeout=0.5)
    def slow(msg: Slow, ctx: Context) -> None:
        runs[ctx.message_id] += 1
        if msg.hang:
            release.wait(60)
            return
        handled[ctx.message_id] += 1

    dead = DeadLetterCollector()
    ids: list[str] = []
    counts = Counts()
    connection = await aio_pika.connect_robust(node.url)
    try:
        await declare_topology(connection, app)
        channel = await connection.channel()
        dlq = await channel.declare_queue(app.topology().dlq.name, passive=True)
        await dlq.consume(dead.on_message)
        async with running(Worker(app, grace_period=2, hooks=counts)) as worker:
            async with app.publisher() as pub:
                for n in range(hanging):
                    await pub.publish(Slow(n=n, hang=True), message_id=f"{tag}-hang-{n}")
                # their four attempts leave 4 x ``hanging`` threads behind
                with contextlib.suppress(AssertionError):
                    await wait_for(lambda: len(dead.dead) >= hanging, timeout=20)
                for n in range(healthy):
                    ids.append(await pub.publish(Slow(n=n), message_id=f"{tag}-{n}"))
            with contextlib.suppress(AssertionError):
                await wait_for(
                    lambda: (
                        all(m in handled or m in dead.dead for m in ids)
                        and all(f"{tag}-hang-{n}" in dead.dead for n in range(hanging))
                    ),
                    timeout=40,
                )
            pool = worker._executor  # the HandlerPool
            threads = {"threads": pool.threads, "abandoned": pool.abandoned_count}
            release.set()
        await asyncio.sleep(0.5)
        await delete_app_objects(connection, app)
    finally:
        release.set()
        await connection.close()
    healthy_dead = {m: r for m, r in dead.headers.items() if "-hang-" not in m}
    tally = Tally(published=set(ids), handled=Counter({m: handled[m] for m in ids}),
                  dead=Counter({m: 1 for m in healthy_dead}), dlq_reasons=Counter(
                      reason_of(h) for h in healthy_dead.values()))  # fmt: skip
    never_ran = sum(1 for m in ids if runs[m] == 0)
    return Result(
        "hung sync handlers (timeout 0.5 s) among healthy ones",
        "quorum",
        healthy,
        f"{hanging} messages hang forever, {prefetch} threads",
        tally,
        seconds=time.monotonic() - started,
        notes=[f"healthy messages dead-lettered: {len(healthy_dead)}",
               f"healthy messages that never ran: {never_ran}",
               f"hung messages dead-lettered: {sum(1 for m in dead.dead if '-hang-' in m)}",
               f"handler threads at the end: {threads}"],
    )  # fmt: skip
