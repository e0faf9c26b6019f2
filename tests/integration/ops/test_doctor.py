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
from rabbitq.amqp.connection import connect
from rabbitq.amqp.topology import declare, plan
from rabbitq.cli import main
from rabbitq.ops.doctor import diagnose, worst
from rabbitq.ops.doctor_probe import Management, gather
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
    assert any(f"{queue}.dlq" in m and "max-length=10" in m and "dropped" in m
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
