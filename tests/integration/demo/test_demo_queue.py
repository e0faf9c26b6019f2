"""``rabbitq demo --queue NAME`` runs the demo on its own names, so that tests (and two
people sharing a broker) never touch the demo's ``rabbitq-demo`` (issue 12, item 3)."""

from __future__ import annotations

import orjson
import pytest

from rabbitq._amqp.topology import queue_depths
from tests.helpers import run_cli_async

pytestmark = [pytest.mark.broker, pytest.mark.slow]


async def test_the_demo_runs_and_cleans_up_on_the_queue_it_is_given(broker_url, uid, connection):
    queue = f"t.{uid}.demo"
    names = [queue, f"{queue}.retry.1s", f"{queue}.retry.3s", f"{queue}.dlq"]
    demo_before = await queue_depths(connection, [("rabbitq-demo", "main")])
    try:
        run = await run_cli_async("demo", "--queue", queue, url=broker_url)
        assert run.returncode == 0, run.stderr
        assert f"rabbitq dlq list {queue}" in run.stdout  # the next steps name its queue
        assert "rabbitq-demo" not in run.stdout
        depths = await queue_depths(connection, [(n, "queue") for n in names])
        assert [d.exists for d in depths] == [True] * 4
        assert depths[-1].messages == 5  # the five dead letters wait in its own DLQ
    finally:
        cleaned = await run_cli_async(
            "demo", "--queue", queue, "--cleanup", "--json", url=broker_url
        )
    assert cleaned.returncode == 0, cleaned.stderr
    assert orjson.loads(cleaned.stdout)["deleted_queues"] == names
    # The demo's own queue is as it was (there or not, with what it held).
    assert await queue_depths(connection, [("rabbitq-demo", "main")]) == demo_before


async def test_the_demo_queue_can_come_from_the_environment(broker_url, uid, connection):
    queue = f"t.{uid}.demo"
    try:
        run = await run_cli_async(
            "demo", "--json", url=broker_url, env={"RABBITQ_DEMO_QUEUE": queue}
        )
        assert run.returncode == 0, run.stderr
        assert orjson.loads(run.stdout)["ok"] is True
        (dlq,) = await queue_depths(connection, [(f"{queue}.dlq", "dlq")])
        assert dlq.exists and dlq.messages == 5
    finally:
        await run_cli_async("demo", "--cleanup", url=broker_url, env={"RABBITQ_DEMO_QUEUE": queue})


@pytest.mark.parametrize("name", ["", "amq.x"])
async def test_a_queue_name_the_broker_would_refuse_is_a_usage_error(broker_url, name):
    result = await run_cli_async("demo", "--queue", name, url=broker_url)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
