"""The topology contract (docs/contract.md, "Topology and naming"), read back from the
broker with rabbitmqctl.

The CLI runs as a real subprocess (``python -m rabbitq topology service:app``) on an app
module written to a temporary directory, so its message types never meet this process's
type registry. Expected arguments are written out by hand from the contract, not computed
with rabbitq's own ``plan()``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import aio_pika
import orjson
import pytest

from rabbitq import App, Message, RetryPolicy, TopologyMismatch, Worker
from rabbitq._amqp.topology import dlq_arguments

from ..helpers import queue_depth, running

pytestmark = pytest.mark.broker

# The CLI's app: Charge uses the app's delays (0.5, 1, 90), Refund overrides them with
# (1, 1.5, 120) and Report with (3600,): one retry queue per distinct delay over all.
SERVICE = """
from rabbitq import App, Message, RetryPolicy

class Charge(Message, type="test.topology.charge"):
    amount: int

class Refund(Message, type="test.topology.refund"):
    amount: int

class Report(Message, type="test.topology.report"):
    day: str

app = App(
    queue={queue!r},
    exchange={exchange!r},
    retry=RetryPolicy(delays=(0.5, 1, 90)),
    queue_type={queue_type!r},
    delivery_limit=7,
)

@app.handler(Charge)
async def charge(msg):
    pass

@app.handler(Refund, retry=RetryPolicy(delays=(1, 1.5, 120)))
async def refund(msg):
    pass

@app.handler(Report, retry=RetryPolicy(delays=(3600,)))
def report(msg, ctx):
    pass
"""
TYPE_NAMES = {"test.topology.charge", "test.topology.refund", "test.topology.report"}
RETRY_TTLS = {
    "500ms": 500,
    "1s": 1000,
    "1500ms": 1500,
    "90s": 90_000,
    "2m": 120_000,
    "1h": 3_600_000,
}


# The same types in this process, for the library-side tests.
class Charge(Message, type="test.topology.charge"):
    amount: int


class Refund(Message, type="test.topology.refund"):
    amount: int


class Report(Message, type="test.topology.report"):
    day: str


def expected_queues(queue: str, queue_type: str) -> dict[str, dict[str, Any]]:
    """The contract's table, written out: queue name -> exact arguments."""
    quorum = {
        "x-queue-type": "quorum",
        "x-delivery-limit": 7,
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
    }
    extra = quorum if queue_type == "quorum" else {}
    queues: dict[str, dict[str, Any]] = {
        queue: {
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": f"{queue}.dlq",
            **extra,
        },
        f"{queue}.dlq": dlq_arguments(queue_type),
    }
    for label, ms in RETRY_TTLS.items():
        queues[f"{queue}.retry.{label}"] = {
            "x-message-ttl": ms,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": queue,
            **extra,
        }
    return queues


async def rabbitmqctl(*args: str) -> Any:
    """Run ``rabbitmqctl ARGS --formatter json`` and return the parsed output."""
    proc = await asyncio.create_subprocess_exec(
        "rabbitmqctl",
        *args,
        "--formatter",
        "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


async def broker_queues(prefix: str) -> dict[str, dict[str, Any]]:
    """Queues whose name starts with ``prefix``: name -> {durable, arguments}.

    rabbitmqctl writes arguments as ``[name, amqp-type, value]`` triples.
    """
    rows = await rabbitmqctl("list_queues", "name", "arguments", "durable")
    return {
        row["name"]: {
            "durable": row["durable"],
            "arguments": {name: value for name, _type, value in row["arguments"]},
        }
        for row in rows
        if row["name"].startswith(prefix)
    }


async def broker_bindings(exchange: str) -> set[tuple[str, str, str]]:
    """Bindings from ``exchange``: (destination kind, destination, routing key)."""
    rows = await rabbitmqctl("list_bindings", "source_name", "destination_kind",
                             "destination_name", "routing_key")  # fmt: skip
    return {
        (row["destination_kind"], row["destination_name"], row["routing_key"])
        for row in rows
        if row["source_name"] == exchange
    }


async def broker_exchange(name: str) -> dict[str, Any] | None:
    rows = await rabbitmqctl("list_exchanges", "name", "type", "durable")
    return next((row for row in rows if row["name"] == name), None)


async def run_cli(cwd: Path, *args: str) -> tuple[int, str, str]:
    """``python -m rabbitq ARGS`` as a real subprocess: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rabbitq",
        *args,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture(autouse=True)
def _rabbitmqctl_available() -> None:
    if shutil.which("rabbitmqctl") is None:
        pytest.fail("these tests read queue arguments with rabbitmqctl, which is not on PATH")


@pytest.fixture
def names(uid: str) -> dict[str, str]:
    return {"queue": f"t.{uid}.cli", "exchange": f"t.{uid}.x", "prefix": f"t.{uid}."}


@pytest.fixture
async def cleanup(connection, names):
    """Delete every queue of this test (by prefix) and its exchange afterwards."""
    yield
    leftover = await broker_queues(names["prefix"])
    channel = await connection.channel()
    for queue in leftover:
        await channel.queue_delete(queue)
    await channel.exchange_delete(names["exchange"])
    await channel.close()


def write_service(tmp_path: Path, names: dict[str, str], queue_type: str) -> None:
    source = SERVICE.format(queue=names["queue"], exchange=names["exchange"], queue_type=queue_type)
    (tmp_path / "service.py").write_text(textwrap.dedent(source))


@pytest.mark.slow
@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
async def test_the_cli_declares_every_queue_with_exactly_the_designed_arguments(
    tmp_path, broker_url, names, cleanup, queue_type
):
    write_service(tmp_path, names, queue_type)

    code, out, err = await run_cli(
        tmp_path, "topology", "service:app", "--url", broker_url, "--json"
    )

    assert code == 0, err
    expected = expected_queues(names["queue"], queue_type)
    actual = await broker_queues(names["prefix"])
    assert set(actual) == set(expected)  # exactly one retry queue per distinct delay
    for name, arguments in expected.items():
        assert actual[name] == {"durable": True, "arguments": arguments}, name
    printed = {row["name"] for row in orjson.loads(out)}  # one JSON array
    assert set(expected) <= printed


@pytest.mark.slow
async def test_the_cli_declares_a_durable_topic_exchange_bound_to_the_queue_by_each_type(
    tmp_path, broker_url, names, cleanup
):
    write_service(tmp_path, names, "classic")

    code, _, err = await run_cli(tmp_path, "topology", "service:app", "--url", broker_url)

    assert code == 0, err
    assert await broker_exchange(names["exchange"]) == {
        "name": names["exchange"],
        "type": "topic",
        "durable": True,
    }
    assert await broker_bindings(names["exchange"]) == {
        ("queue", names["queue"], type_name) for type_name in TYPE_NAMES
    }


@pytest.mark.slow
async def test_declaring_the_topology_twice_changes_nothing_and_keeps_queued_messages(
    tmp_path, broker_url, names, cleanup, connection
):
    write_service(tmp_path, names, "quorum")
    code, _, err = await run_cli(tmp_path, "topology", "service:app", "--url", broker_url)
    assert code == 0, err
    queues_before = await broker_queues(names["prefix"])
    bindings_before = await broker_bindings(names["exchange"])

    # A worker of the same app declares the same topology again without complaint...
    app = App(
        queue=names["queue"],
        exchange=names["exchange"],
        url=broker_url,
        retry=RetryPolicy(delays=(0.5, 1, 90)),
        queue_type="quorum",
        delivery_limit=7,
    )
    app.handler(Charge)(lambda msg: None)
    app.handler(Refund, retry=RetryPolicy(delays=(1, 1.5, 120)))(lambda msg: None)
    app.handler(Report, retry=RetryPolicy(delays=(3600,)))(lambda msg: None)
    async with running(Worker(app)):
        pass
    # ...and so does the CLI, without touching a message waiting in the queue.
    channel = await connection.channel(publisher_confirms=True)
    exchange = await channel.get_exchange(names["exchange"])
    await exchange.publish(
        aio_pika.Message(b'{"amount": 1}', type="test.topology.charge"),
        routing_key="test.topology.charge",
    )
    await channel.close()
    code, _, err = await run_cli(tmp_path, "topology", "service:app", "--url", broker_url)
    assert code == 0, err

    assert await broker_queues(names["prefix"]) == queues_before
    assert await broker_bindings(names["exchange"]) == bindings_before
    # (rabbitmqctl's message counts of quorum queues lag; a passive declare does not.)
    assert await queue_depth(connection, names["queue"]) == 1


# A deployed queue that differs from what the app declares, and the argument that differs.
MISMATCHES = [
    pytest.param(".retry.1s", {"x-message-ttl": 2000}, "classic", "x-message-ttl", id="ttl"),
    # A classic DLQ, now declared by an app switched to quorum queues.
    pytest.param(
        ".dlq",
        {"x-overflow": "reject-publish"},
        "quorum",
        "exists as a classic queue, the app wants quorum",
        id="classic-to-quorum",
    ),  # fmt: skip
    # A DLQ declared before it had x-overflow (issue 11): see docs/reliability.md to migrate.
    pytest.param(".dlq", {}, "classic", "x-overflow", id="dlq-without-overflow"),
]


@pytest.mark.parametrize(("suffix", "existing", "queue_type", "argument"), MISMATCHES)
async def test_the_cli_reports_a_queue_with_other_arguments_in_one_actionable_line(
    tmp_path, broker_url, names, cleanup, connection, suffix, existing, queue_type, argument
):
    conflicting = names["queue"] + suffix
    channel = await connection.channel()
    await channel.declare_queue(conflicting, durable=True, arguments=existing)
    await channel.close()
    write_service(tmp_path, names, queue_type)

    code, out, err = await run_cli(tmp_path, "topology", "service:app", "--url", broker_url)

    assert code == 1
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert conflicting in line
    assert argument in line
    assert f"rabbitmqctl delete_queue {conflicting}" in line  # says what to do
    # The deployed queue is left as it was.
    assert (await broker_queues(conflicting))[conflicting]["arguments"] == existing


async def test_the_worker_raises_topology_mismatch_for_a_queue_with_other_arguments(
    make_app, connection
):
    app = make_app(retry=RetryPolicy(delays=(1,)))
    app.handler(Charge)(lambda msg: None)
    retry_queue = f"{app.queue}.retry.1s"
    channel = await connection.channel()
    await channel.declare_queue(retry_queue, durable=True, arguments={"x-message-ttl": 5000})
    await channel.close()

    with pytest.raises(TopologyMismatch) as caught:
        async with running(Worker(app)):
            pass

    assert (caught.value.kind, caught.value.name, caught.value.argument) == (
        "queue",
        retry_queue,
        "x-message-ttl",
    )
    assert retry_queue in str(caught.value)
    assert (await broker_queues(retry_queue))[retry_queue]["arguments"] == {"x-message-ttl": 5000}
