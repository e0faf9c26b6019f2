"""``rabbitq doctor`` against a private node with the management plugin, where a policy
and an operator policy put the app's queues at risk (tests/ops/test_doctor.py covers every
decision as data; this proves the facts are gathered right)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import uuid
from collections.abc import Iterator

import aio_pika
import pytest
from click.testing import CliRunner

from rabbitq import App, Message, RetryPolicy
from rabbitq._amqp.connection import connect
from rabbitq._amqp.topology import declare, plan
from rabbitq._ops.doctor import diagnose, worst
from rabbitq._ops.doctor_probe import Management, gather
from rabbitq.cli import main
from tests.broker_node import BrokerNode, free_port

pytestmark = [pytest.mark.broker, pytest.mark.slow]


class Ping(Message, type="doctor.live.ping"):
    n: int = 0


@pytest.fixture(scope="module")
def node() -> Iterator[BrokerNode]:
    if shutil.which("rabbitmq-server") is None:
        if os.environ.get("CI"):
            pytest.fail("the doctor tests start a private RabbitMQ node")
        pytest.skip("no rabbitmq-server")
    with BrokerNode.started(
        "rabbitq-doctor",
        config="collect_statistics_interval = 500\n",
        plugins=("rabbitmq_management",),
    ) as started:
        yield started


def make_app(queue: str, url: str, delivery_limit: int = 10) -> App:
    app = App(queue=queue, url=url, delivery_limit=delivery_limit,
              retry=RetryPolicy(delays=(1, 10)))  # fmt: skip

    @app.handler(Ping, timeout=30)
    async def ping(msg: Ping) -> None: ...

    return app


async def prepare(node: BrokerNode, queue: str) -> None:
    """The app's queues; two retry queues an older version of the app declared (5m with
    2 messages, 1m empty) and a queue named like one without a TTL (2m, 1 message); a
    policy that lets the DLQ drop its oldest messages and an operator policy that
    expires the main queue's."""
    connection = await connect(node.url, name="doctor test")
    try:
        channel = await connection.channel()
        await declare(channel, make_app(queue, node.url).topology())
        old = plan(queue=queue, exchange="rabbitq", delays_ms=(60_000, 300_000),
                   routing_keys=(), queue_type="quorum")  # fmt: skip
        for spec in old.retries:
            await channel.declare_queue(spec.name, durable=True, arguments=dict(spec.arguments))
        plain = await channel.declare_queue(f"{queue}.retry.2m", durable=True)
        for name in (f"{queue}.retry.5m", f"{queue}.retry.5m", plain.name):
            await channel.default_exchange.publish(aio_pika.Message(b"{}"), name)
    finally:
        await connection.close()
    await asyncio.to_thread(
        node.ctl, "set_policy", "--apply-to", "queues", f"dlq-cap-{queue}",
        f"^{queue}\\.dlq$", '{"max-length": 10, "overflow": "drop-head"}',
    )  # fmt: skip
    await asyncio.to_thread(
        node.ctl, "set_operator_policy", "--apply-to", "queues", f"ttl-{queue}",
        f"^{queue}$", '{"message-ttl": 60000}',
    )  # fmt: skip
    # The management API shows policies with the next statistics round: wait for it.
    api = Management.for_broker(node.url, node.management_url)
    for _ in range(40):
        queues = {q["name"]: q for q in await asyncio.to_thread(api.queues)}
        if queues.get(queue, {}).get("operator_policy") and queues.get(f"{queue}.dlq", {}).get(
            "policy"
        ):
            return
        await asyncio.sleep(0.5)
    raise AssertionError("the policies did not show in the management API")


async def test_doctor_finds_the_policies_the_stale_retry_queue_and_the_drift(node):
    queue = f"doc.{uuid.uuid4().hex[:8]}"
    await prepare(node, queue)
    facts = await gather(make_app(queue, node.url), url=node.url,
                         management_url=node.management_url)  # fmt: skip
    assert facts.management_error is None
    assert str(facts.broker.version).startswith("3.10")
    found = diagnose(facts)
    by_topic = {(f.topic, f.level): f for f in found}
    dlq = by_topic[("policies", "danger")]
    messages = [f.message for f in found if f.level != "info"]
    assert any(f"{queue}.dlq" in m and "max-length 10" in m and "dropped" in m
               for m in messages), messages  # fmt: skip
    assert any(f"operator policy 'ttl-{queue}'" in m and "message-ttl 60000" in m
               for m in messages), messages  # fmt: skip
    stale = {f.message.split()[0]: f for f in found if f.topic == "retry queues"}
    assert sorted(stale) == [f"{queue}.retry.{d}" for d in ("1m", "2m", "5m")], stale
    back, lost, empty = (stale[f"{queue}.retry.{d}"] for d in ("5m", "2m", "1m"))
    assert back.level == "warning" and "holds 2 message(s)" in back.message
    assert f"come back to {queue} when its TTL (5m) runs out" in back.message
    assert back.fix and "--prune" in back.fix
    assert lost.level == "danger" and "holds 1 message(s) that never come back" in lost.message
    assert lost.fix and "shovel" in lost.fix
    assert empty.level == "info" and "safe to delete" in empty.message
    assert dlq.fix and worst(found) == "danger"
    assert not [f for f in found if f.topic == "queues"]  # no drift for the app itself

    drifted = await gather(make_app(queue, node.url, delivery_limit=3), url=node.url,
                           management_url=node.management_url)  # fmt: skip
    drift = [f for f in diagnose(drifted) if f.topic == "queues"]
    assert drift and "x-delivery-limit is 10 on the broker, the app declares 3" in drift[0].message


async def test_without_the_management_api_doctor_says_what_it_could_not_check(node):
    queue = f"doc.{uuid.uuid4().hex[:8]}"
    await prepare(node, queue)
    facts = await gather(make_app(queue, node.url, delivery_limit=3), url=node.url,
                         management_url=f"http://127.0.0.1:{free_port()}")  # fmt: skip
    found = diagnose(facts)
    assert [f.level for f in found if f.topic == "management"] == ["warning"]
    drift = [f for f in found if f.topic == "queues"]  # from the broker's refusal
    assert drift and "x-delivery-limit" in drift[0].message


def test_the_command_exits_1_on_a_danger_and_never_prints_the_password(node, tmp_path, monkeypatch):
    queue = f"doc.{uuid.uuid4().hex[:8]}"
    asyncio.run(prepare(node, queue))
    module = f"doctorapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "from tests.integration.ops.test_doctor import make_app\n"
        f"app = make_app({queue!r}, {node.url!r})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    runner = CliRunner()
    args = ["doctor", f"{module}:app", "--url", node.url,
            "--management-url", node.management_url]  # fmt: skip
    text = runner.invoke(main, args)
    assert text.exit_code == 1, text.output
    assert "DANGER" in text.output and "fix: " in text.output
    assert "guest:guest" not in text.output
    as_json = runner.invoke(main, [*args, "--json"])
    report = json.loads(as_json.output)
    assert as_json.exit_code == 1 and report["worst"] == "danger"
    assert report["broker_version"].startswith("3.10")
    sys.modules.pop(module, None)


class Doomed(Message, type="doctor.live.doomed"):
    n: int


async def test_a_worker_names_a_dlq_policy_that_drops_dead_letters(node, monkeypatch, caplog):
    # Issue 20, item 7: an operator policy message-ttl 2000 on a quorum DLQ drops every
    # dead letter 2 s after the worker stored it. rabbitq cannot stop that; the worker
    # must say so at start (ERROR), in rabbitq_dlq_drop_risk and in /readyz (still 200).
    import logging

    from prometheus_client import CollectorRegistry

    from rabbitq import Metrics, PermanentError, Worker, serve_metrics
    from rabbitq._ops import queue_watch
    from tests.helpers import Recorder, queue_depth, wait_for
    from tests.scrape import http_get

    caplog.set_level(logging.INFO, logger="rabbitq.worker")
    queue = f"drop.{uuid.uuid4().hex[:8]}"
    app = App(queue=queue, url=node.url, retry=RetryPolicy(delays=()))

    @app.handler(Doomed, timeout=5)
    async def doomed(msg: Doomed) -> None:
        raise PermanentError("never works")

    connection = await connect(node.url, name="drop test")
    await declare(await connection.channel(), app.topology())
    policy = f"dlq-ttl-{queue}"
    await asyncio.to_thread(
        node.ctl, "set_operator_policy", "--apply-to", "queues", policy,
        f"^{queue}\\.dlq$", '{"message-ttl": 2000}',
    )  # fmt: skip
    api = Management.for_broker(node.url, node.management_url)
    for _ in range(40):  # the API shows a policy with its next statistics round
        listed = {q["name"]: q for q in await asyncio.to_thread(api.queues)}
        if listed.get(f"{queue}.dlq", {}).get("operator_policy") == policy:
            break
        await asyncio.sleep(0.5)
    monkeypatch.setenv("RABBITQ_MANAGEMENT_URL", node.management_url)
    metrics, rec = Metrics(CollectorRegistry()), Recorder()
    worker = Worker(app, hooks=[metrics, rec])
    gauge = lambda: metrics.registry.get_sample_value(  # noqa: E731
        "rabbitq_dlq_drop_risk", {"queue": f"{queue}.dlq"}
    )
    async with serve_metrics(worker, metrics, port=0, bind="127.0.0.1") as server:
        running = asyncio.create_task(queue_watch.alongside(worker.run, worker, metrics))
        await wait_for(worker.ready.is_set)
        async with app.publisher() as pub:
            for n in range(20):
                await pub.publish(Doomed(n=n))
        await wait_for(lambda: rec.count("dead_lettered") == 20)
        await wait_for(lambda: gauge() == 1, timeout=20)
        readyz = await asyncio.to_thread(http_get, f"http://127.0.0.1:{server.port}/readyz")
        await asyncio.sleep(3)  # past the policy's TTL
        depth = await queue_depth(connection, f"{queue}.dlq")
        worker.stop()
        await asyncio.wait_for(running, 60)
    # the loss itself: 20 of 20 dead letters gone; what changed is that it is said
    assert depth == 0
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(m.startswith(f"danger: {queue}.dlq drops messages: message-ttl 2000 (operator "
                            f"policy '{policy}')") for m in said), said  # fmt: skip
    assert readyz[0] == 200 and readyz[1].startswith(f"ready; {queue}.dlq drops messages: "), readyz
    await asyncio.to_thread(node.ctl, "clear_operator_policy", policy)
    watch = queue_watch.QueueWatch(app.topology(), api, metrics)
    watch.risks = []  # as the worker's watch had it: then the policy went away
    for _ in range(40):
        await watch.round()
        if gauge() == 0:
            break
        await asyncio.sleep(0.5)
    assert gauge() == 0 and metrics.ready_detail() is None
    await connection.close()


class Once(Message, type="doctor.live.once"):
    n: int


async def test_retries_held_by_the_broker_after_the_main_queue_is_deleted_are_counted(
    node, caplog
):
    # Issue 20, item 8: on quorum queues, retries whose delay runs out while the main
    # queue is missing (the worker's re-declare wait) are held by RabbitMQ's dead-letter
    # process for about 3 minutes, and every AMQP depth says 0. The watch counts them
    # (rabbitq_dead_letters_held_by_broker) and says so; a policy change on the retry
    # queue, the operator's remedy, sends them at once.
    import logging
    import time

    from prometheus_client import CollectorRegistry

    from rabbitq import Context, Metrics, Worker
    from rabbitq._ops import queue_watch
    from tests.helpers import Recorder, queue_depth, running, wait_for

    caplog.set_level(logging.INFO)
    queue = f"held.{uuid.uuid4().hex[:8]}"
    # A 4 s delay, and the queue deleted as soon as every first attempt failed: no retry
    # comes back before the delete, even on a loaded machine (with 1 s, 12 of 20 came
    # back first under a full parallel suite); the 8 s re-declare wait outlasts them all.
    app = App(queue=queue, url=node.url, retry=RetryPolicy(delays=(4,)))

    @app.handler(Once, timeout=5)
    async def once(msg: Once, ctx: Context) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("fails once")

    messages, metrics, rec = 20, Metrics(CollectorRegistry()), Recorder()
    api = Management.for_broker(node.url, node.management_url)
    watch = queue_watch.QueueWatch(app.topology(), api, metrics)
    retry = app.topology().retries[0].name
    connection = await connect(node.url, name="held test")
    worker = Worker(app, hooks=[metrics, rec])
    worker.keeper.redeclare_wait = 8.0  # every copy's 4 s delay runs out inside the wait
    async with running(worker):
        async with app.publisher() as pub:
            for n in range(messages):
                await pub.publish(Once(n=n))
        await wait_for(lambda: rec.count("retried") == messages)
        await (await connection.channel()).queue_delete(queue)
        await wait_for(lambda: worker.keeper.redeclared == 1, timeout=20)
        for _ in range(40):  # statistics arrive every 0.5 s on this node
            await watch.round()
            if watch.held.get(retry) == messages:
                break
            await asyncio.sleep(0.5)
        seen = dict(watch.held)
        depths = [await queue_depth(connection, name) for name in (queue, retry)]
        gauge = metrics.registry.get_sample_value(
            "rabbitq_dead_letters_held_by_broker", {"queue": retry}
        )
        assert rec.count("succeeded") == 0
        touched = time.monotonic()
        touch = ("set_policy", "--apply-to", "queues", f"touch-{queue}", f"^{retry}$")
        await asyncio.to_thread(node.ctl, *touch, '{"max-length": 1000000}')
        await asyncio.to_thread(node.ctl, "clear_policy", f"touch-{queue}")
        await wait_for(lambda: rec.count("succeeded") == messages, timeout=20)
        back_after = time.monotonic() - touched
    for _ in range(40):
        await watch.round()
        if not watch.held.get(retry):
            break
        await asyncio.sleep(0.5)
    await connection.close()
    assert seen == {queue: 0, retry: messages}, seen
    assert depths == [0, 0]  # invisible over AMQP
    assert gauge == messages
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith(f"RabbitMQ holds {messages} dead letter(s) of {retry}") for m in said)
    assert any("are held by RabbitMQ, not lost" in m for m in said)  # the worker's own line
    assert back_after < 10, back_after  # not 3 minutes
    assert watch.held[retry] == 0


async def test_delayed_messages_held_in_a_ladder_level_are_counted_and_named(node, caplog):
    # docs/delays.md, "Restarts": a quorum ladder level holds what its next hop did not
    # confirm (the app's queue deleted here; not back yet after a broker restart in the
    # chaos test) until the broker's dead-letter timer runs out, 3 minutes, and every
    # AMQP depth says 0. The queue watch counts it per level and names it once; a policy
    # change on the level, once the queue is back, sends them on at once.
    import logging

    from prometheus_client import CollectorRegistry

    from rabbitq import Context, Metrics, Worker
    from rabbitq._ops import queue_watch
    from tests.helpers import Recorder, running, wait_for

    caplog.set_level(logging.INFO)
    queue = f"delayed.{uuid.uuid4().hex[:8]}"
    # A vhost whose rabbitq.delay.deliver an older rabbitq declared, without the alternate
    # exchange that now takes a deleted queue's delayed messages (docs/delays.md, "A queue
    # deleted while its messages wait"): there they are still held as before.
    vhost = f"held-{queue}"
    await asyncio.to_thread(node.ctl, "add_vhost", vhost)
    await asyncio.to_thread(node.ctl, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    url = f"{node.url}{vhost}"
    app = App(queue=queue, url=url)

    @app.handler(Once, timeout=5)
    async def once(msg: Once, ctx: Context) -> None: ...

    messages, metrics, rec = 10, Metrics(CollectorRegistry()), Recorder()
    api = Management.for_broker(url, node.management_url)
    watch = queue_watch.QueueWatch(app.topology(), api, metrics)
    connection = await connect(url, name="ladder held test")
    channel = await connection.channel()
    await channel.declare_exchange("rabbitq.delay.deliver", "headers", durable=True)
    await declare(channel, app.topology())
    async with app.publisher() as pub:
        for n in range(messages):
            await pub.publish(Once(n=n), delay=0.5)  # level 2 only, then the app's queue
    await channel.queue_delete(queue)
    for _ in range(60):  # statistics arrive every 0.5 s on this node
        await asyncio.sleep(0.5)
        await watch.round()
        if sum(n for name, n in watch.held.items() if name in watch.ladder) == messages:
            break
    held = {name: n for name, n in watch.held.items() if name in watch.ladder and n}
    gauges = {
        name: metrics.registry.get_sample_value(
            "rabbitq_dead_letters_held_by_broker", {"queue": name}
        )
        for name in held
    }
    async with running(Worker(app, hooks=[rec])):  # the queue back, then the remedy
        for name in held:
            touch = ("set_policy", "-p", vhost, "--apply-to", "queues", f"touch-{queue}",
                     f"^{name}$")  # fmt: skip
            await asyncio.to_thread(node.ctl, *touch, '{"max-length": 1000000}')
            await asyncio.to_thread(node.ctl, "clear_policy", "-p", vhost, f"touch-{queue}")
        await wait_for(lambda: rec.count("succeeded") == messages, timeout=30)
    await channel.queue_delete(queue)
    await connection.close()
    await asyncio.to_thread(node.ctl, "delete_vhost", vhost)
    assert list(held.values()) == [messages], held  # all in one level: 500 ms is level 2
    assert gauges == {name: messages for name in held}
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    level = next(iter(held))
    ours = f"RabbitMQ holds {messages} delayed message(s) in the delay ladder's level {level}"
    assert sum(m.startswith(ours) for m in said) == 1, said
