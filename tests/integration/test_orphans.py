"""After a change of delays, the old retry queues are named with their depth, and
``rabbitq topology --prune`` deletes the empty ones; a queue of the other type is said
as such (issue 12, item 7). The real commands, as subprocesses."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aio_pika
import orjson
import pytest

from rabbitq._amqp.topology import queue_depths
from tests.helpers import run_cli_async

pytestmark = pytest.mark.broker

SERVICE = """
import os

from rabbitq import App, Message, RetryPolicy


class Ping(Message, type="t.orphans.ping"):
    n: int


delays = tuple(float(d) for d in os.environ["T_DELAYS"].split(","))
app = App(
    queue=os.environ["T_QUEUE"],
    exchange=os.environ["T_QUEUE"],
    retry=RetryPolicy(delays=delays),
    queue_type=os.environ.get("T_TYPE", "classic"),
)


@app.handler(Ping)
async def ping(msg: Ping) -> None:
    pass
"""


async def run(directory: Path, *args: str, url: str, **env: str) -> tuple[int, str, str]:
    """``rabbitq ARGS`` run in ``directory`` by :func:`tests.helpers.run_cli`, 200 columns
    wide, with ``env`` added: its exit code, stdout and stderr (the shape this module's
    tests and the topology tests that import it unpack)."""
    done = await run_cli_async(*args, cwd=directory, url=url, columns=200, env=env)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
async def service(tmp_path, uid, connection):
    (tmp_path / "service.py").write_text(SERVICE)
    queue = f"t.{uid}.orph"
    yield tmp_path, queue
    channel = await connection.channel()
    for suffix in ("", ".dlq", ".retry.1s", ".retry.2s", ".retry.10m"):
        await channel.queue_delete(queue + suffix)
    await channel.exchange_delete(queue)
    await channel.close()


async def put(connection, name: str) -> None:
    channel = await connection.channel(publisher_confirms=True)
    await channel.default_exchange.publish(aio_pika.Message(b'{"n": 1}'), routing_key=name)
    await channel.close()


@pytest.mark.slow
async def test_changed_delays_name_the_old_retry_queues_and_prune_deletes_the_empty_ones(
    service, broker_url, connection
):
    directory, queue = service
    code, _, err = await run(directory, "topology", "service:app", url=broker_url,
                             T_QUEUE=queue, T_DELAYS="1,600")  # fmt: skip
    assert code == 0, err
    assert err == ""  # nothing orphaned yet
    await put(connection, f"{queue}.retry.10m")

    code, _, err = await run(directory, "topology", "service:app", url=broker_url,
                             T_QUEUE=queue, T_DELAYS="2")  # fmt: skip
    assert code == 0, err
    (line,) = err.strip().splitlines()
    assert f"{queue}.retry.1s (0 messages)" in line
    assert f"{queue}.retry.10m (1 message)" in line
    assert "rabbitq topology service:app --prune" in line

    code, out, err = await run(directory, "topology", "service:app", "--prune", "--json",
                               url=broker_url, T_QUEUE=queue, T_DELAYS="2")  # fmt: skip
    assert code == 0, err
    rows = orjson.loads(out)  # one JSON array
    assert [(r["kind"], r["name"]) for r in rows if r["kind"] in ("pruned", "kept")] == [
        ("kept", f"{queue}.retry.10m"),  # in name order
        ("pruned", f"{queue}.retry.1s"),
    ]
    one, ten = await queue_depths(
        connection, [(f"{queue}.retry.1s", "retry"), (f"{queue}.retry.10m", "retry")]
    )
    assert not one.exists
    assert ten.exists and ten.messages == 1  # a queue with a message is never deleted


async def test_the_worker_warns_about_orphaned_retry_queues_when_it_starts(
    service, broker_url, connection
):
    directory, queue = service
    code, _, err = await run(directory, "topology", "service:app", url=broker_url,
                             T_QUEUE=queue, T_DELAYS="1")  # fmt: skip
    assert code == 0, err
    env = {**os.environ, "RABBITQ_URL": broker_url, "T_QUEUE": queue, "T_DELAYS": "2"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rabbitq", "worker", "service:app", cwd=directory, env=env,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    seen: list[str] = []
    while not any("consuming" in line for line in seen):
        line = (await asyncio.wait_for(proc.stderr.readline(), timeout=60)).decode()
        assert line, "".join(seen)
        seen.append(line)
    proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(proc.communicate(), timeout=60)
    warnings = [line for line in seen if " WARNING " in line]
    assert len(warnings) == 1, seen
    assert f"{queue}.retry.1s (0 messages)" in warnings[0]


@pytest.mark.parametrize(("existing", "wanted"), [("classic", "quorum"), ("quorum", "classic")])
async def test_a_queue_of_the_other_type_stops_the_worker_with_one_line_that_says_so(
    service, broker_url, existing, wanted
):
    directory, queue = service
    code, _, err = await run(directory, "topology", "service:app", url=broker_url,
                             T_QUEUE=queue, T_DELAYS="1", T_TYPE=existing)  # fmt: skip
    assert code == 0, err
    code, _, err = await run(directory, "worker", "service:app", url=broker_url,
                             T_QUEUE=queue, T_DELAYS="1", T_TYPE=wanted)  # fmt: skip
    assert code == 1
    lines = [line for line in err.strip().splitlines() if " INFO " not in line]
    assert len(lines) == 1, err  # no WARNING about reopening a channel first
    assert f"queue {queue!r} exists as a {existing} queue, the app wants {wanted}" in lines[0]
