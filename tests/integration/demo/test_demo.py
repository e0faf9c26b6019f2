"""``rabbitq demo`` against a real broker: the tally, the command run twice, cleanup.

The batch and its expected tally, which need no broker, are tested in tests/demo/test_demo.py.
"""

from __future__ import annotations

import orjson
import pytest

from rabbitq import cli, demo
from rabbitq._amqp.topology import queue_depths
from rabbitq._ops.containers import docker_available
from tests.demo.test_demo import EXPECTED
from tests.helpers import drain_queue, run_cli


def demo_queues(queue: str) -> list[str]:
    return [queue, f"{queue}.retry.1s", f"{queue}.retry.3s", f"{queue}.dlq"]


# -- in-process, against the broker ------------------------------------------------


@pytest.mark.broker
async def test_run_demo_tallies_exactly_the_expected_outcomes(broker_url, uid, connection):
    queue = f"t.{uid}.demo"
    try:
        summary = await demo.run_demo(
            broker_url, display="none", queue=queue, exchange=queue, count=4, work_time=0
        )
        assert summary.ok, summary.problem
        assert summary.counts == summary.expected
        assert summary.counts.as_dict()["dead_lettered"] == EXPECTED["dead_lettered"]
        dead = await drain_queue(connection, f"{queue}.dlq")
        reasons = {m.message_id: m.headers["rabbitq-reason"] for m in dead}
        assert reasons == {
            "email-unreachable": "exhausted",
            "pay-gateway-down": "exhausted",
            "pay-declined": "permanent",
            "pay-poison": "invalid",
            "sms-unknown": "unknown-type",
        }
    finally:
        done = await demo.cleanup(broker_url, queue=queue, exchange=queue)
    assert [q.name for q in done.queues] == [
        queue,
        f"{queue}.retry.1s",
        f"{queue}.retry.3s",
        f"{queue}.dlq",
    ]
    depths = await queue_depths(connection, [(q.name, q.kind) for q in done.queues])
    assert not any(d.exists for d in depths)


# -- the command ---------------------------------------------------------------------


@pytest.mark.broker
@pytest.mark.slow
async def test_the_demo_command_runs_twice_with_the_same_tally_then_cleans_up(
    broker_url, connection, uid
):
    # Its own names: the demo's rabbitq-demo queues may be what a person is looking at.
    demo = f"t.{uid}.demo"
    first = run_cli("demo", "--queue", demo, url=broker_url)
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert "Settled in" in out
    assert "  handled           19\n" in out
    assert "  retried            8   (1s tier: 5, 3s tier: 3)\n" in out
    assert (
        "  dead-lettered      5   (exhausted: 2, permanent: 1, invalid: 1, unknown-type: 1)\n"
        in out
    )
    assert f"rabbitq stats {demo} --delay 1 --delay 3" in out
    # only commands that exist are suggested
    assert (f"rabbitq dlq list {demo}" in out) == ("dlq" in cli.main.commands)
    assert f"rabbitq demo --queue {demo} --cleanup" in out
    assert f"'{demo}.dlq'" in out
    assert "Traceback" not in first.stderr

    # The second run starts from the first one's leftovers (5 messages in the DLQ).
    second = run_cli("demo", "--queue", demo, "--json", url=broker_url)
    assert second.returncode == 0, second.stderr
    assert second.stderr == ""  # --json: the tally on stdout, nothing on stderr (issue 25)
    tally = orjson.loads(second.stdout)
    assert tally["ok"] is True
    assert {k: tally[k] for k in EXPECTED} == EXPECTED
    assert tally["expected"] == EXPECTED

    cleaned = run_cli("demo", "--queue", demo, "--cleanup", url=broker_url)
    assert cleaned.returncode == 0, cleaned.stderr
    assert cleaned.stdout.startswith(f"deleted {', '.join(demo_queues(demo))} (5 messages)")
    depths = await queue_depths(connection, [(name, "queue") for name in demo_queues(demo)])
    assert [d.exists for d in depths] == [False] * 4

    again = run_cli("demo", "--queue", demo, "--cleanup", url=broker_url)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("nothing to delete")


def test_without_a_broker_the_demo_says_in_one_line_how_to_start_one():
    result = run_cli("demo", "--url", "amqp://guest:guest@127.0.0.1:1/", url="", timeout=30)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: cannot reach RabbitMQ at amqp://")
    assert "rabbitmq-server -detached" in lines[0]
    assert ":guest@" not in lines[0]


@pytest.mark.skipif(docker_available(), reason="Docker runs here: it would start a container")
def test_testcontainers_without_docker_is_a_one_line_error():
    result = run_cli("demo", "--testcontainers", url="", timeout=60)
    assert result.returncode == 1
    error = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(error) == 1, result.stderr
    assert "Docker" in error[0] or "testcontainers" in error[0]
    assert "Traceback" not in result.stderr
