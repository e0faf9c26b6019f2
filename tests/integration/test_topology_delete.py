"""``rabbitq topology MODULE:APP --delete`` (issue 25, item 4): deletes an app's queues,
the retry queues of old delays among them, and its own exchange; refuses, deleting
nothing, while a queue holds messages, unless --force. The real command, on quorum
queues."""

from __future__ import annotations

import aio_pika
import orjson
import pytest

from rabbitq._amqp.topology import queue_depths
from rabbitq.schedule.plan import progress_arguments, progress_queue

from .test_orphans import SERVICE, put, run

pytestmark = pytest.mark.broker

SUFFIXES = ("", ".dlq", ".retry.1s", ".retry.2s", ".retry.10m")


@pytest.fixture
async def service(tmp_path, uid, connection):
    (tmp_path / "service.py").write_text(SERVICE)
    queue = f"t.{uid}.del"
    yield tmp_path, queue
    channel = await connection.channel()
    for suffix in (*SUFFIXES, ".schedules"):
        await channel.queue_delete(queue + suffix)
    await channel.exchange_delete(queue)
    await channel.close()


async def existing(connection, queue: str) -> list[str]:
    depths = await queue_depths(connection, [(queue + s, "q") for s in SUFFIXES])
    return sorted(d.name for d in depths if d.exists)


async def exchange_exists(connection, name: str) -> bool:
    channel = await connection.channel()
    try:
        await channel.declare_exchange(name, passive=True)
    except Exception:
        return False
    await channel.close()
    return True


@pytest.mark.slow
async def test_delete_refuses_while_a_queue_holds_messages_then_force_deletes_everything(
    service, broker_url, connection
):
    directory, queue = service
    env = {"T_QUEUE": queue, "T_TYPE": "quorum"}
    code, _, err = await run(directory, "topology", "service:app", url=broker_url,
                             T_DELAYS="1,600", **env)  # fmt: skip
    assert code == 0, err
    code, _, err = await run(directory, "topology", "service:app", url=broker_url,
                             T_DELAYS="2", **env)  # fmt: skip  (1s and 10m: orphans now)
    assert code == 0, err
    await put(connection, f"{queue}.dlq")
    everything = sorted(queue + s for s in SUFFIXES)
    assert await existing(connection, queue) == everything

    code, out, err = await run(directory, "topology", "service:app", "--delete",
                               url=broker_url, T_DELAYS="2", **env)  # fmt: skip
    assert code == 1
    (line,) = err.strip().splitlines()
    assert line.startswith("Error: not deleting anything: ")
    assert f"{queue}.dlq (1 message(s))" in line and "--force" in line
    assert await existing(connection, queue) == everything

    code, out, err = await run(directory, "topology", "service:app", "--delete", "--dry-run",
                               url=broker_url, T_DELAYS="2", **env)  # fmt: skip
    assert code == 0, err  # a dry run did what it was asked: it says what a delete would do
    assert f"would refuse: not deleting anything: {queue}.dlq (1 message(s))" in out
    assert await existing(connection, queue) == everything

    code, out, err = await run(directory, "topology", "service:app", "--delete", "--force",
                               "--json", url=broker_url, T_DELAYS="2", **env)  # fmt: skip
    assert code == 0, err
    done = orjson.loads(out)  # one JSON document
    assert sorted(r["name"] for r in done["queues"]) == everything
    assert done["exchange"] == {"name": queue, "state": "deleted"}
    assert done["deleted"] is True and done["refusal"] is None
    assert await existing(connection, queue) == []
    assert not await exchange_exists(connection, queue)


async def test_delete_of_an_empty_app_needs_no_force_and_keeps_a_shared_exchange(
    service, broker_url, connection
):
    directory, queue = service
    env = {"T_QUEUE": queue, "T_TYPE": "quorum", "T_DELAYS": "1"}
    code, _, err = await run(directory, "topology", "service:app", url=broker_url, **env)
    assert code == 0, err
    channel = await connection.channel()
    other = await channel.declare_queue(exclusive=True, auto_delete=True)
    await other.bind(queue, routing_key="another.app")  # another app on the same exchange

    code, out, err = await run(directory, "topology", "service:app", "--delete",
                               url=broker_url, **env)  # fmt: skip

    assert code == 0, err
    assert f"deleted main queue {queue} (0 message(s))" in out
    assert f"exchange {queue}: kept (other queues are bound to it)" in out
    assert await existing(connection, queue) == []
    await channel.close()
    assert await exchange_exists(connection, queue)


async def test_delete_takes_the_schedules_record_with_it_and_says_when_the_exchange_was_missing(
    service, broker_url, connection
):
    directory, queue = service
    env = {"T_QUEUE": queue, "T_TYPE": "quorum", "T_DELAYS": "1"}
    code, _, err = await run(directory, "topology", "service:app", url=broker_url, **env)
    assert code == 0, err
    # what a scheduler leaves: <queue>.schedules holding its one progress record
    channel = await connection.channel(publisher_confirms=True)
    record = await channel.declare_queue(
        progress_queue(queue), durable=True, arguments=progress_arguments("quorum")
    )
    await channel.default_exchange.publish(
        aio_pika.Message(b'{"ticks": {}}'), routing_key=record.name
    )
    await channel.close()

    code, out, err = await run(directory, "topology", "service:app", "--delete",
                               url=broker_url, **env)  # fmt: skip

    assert code == 0, err  # its one message is bookkeeping: no --force needed
    assert f"deleted schedules queue {queue}.schedules (1 message(s))" in out
    assert f"exchange {queue}: deleted" in out
    depths = await queue_depths(connection, [(progress_queue(queue), "schedules")])
    assert not depths[0].exists

    code, out, err = await run(directory, "topology", "service:app", "--delete",
                               url=broker_url, **env)  # fmt: skip
    assert code == 0, err
    assert "nothing to delete" in out
    assert f"exchange {queue}: did not exist" in out
    assert "deleted" not in out.replace("nothing to delete", "")
