"""``rabbitq topology --prune`` on quorum queues, the default (issue 25, item 1): quorum
queues refuse a delete with ``if-unused`` (``NOT_IMPLEMENTED``, closing the connection),
so the empty, unused orphans are deleted without it, and a queue that holds a message
or has a consumer is kept. The real command, as a subprocess."""

from __future__ import annotations

import aio_pika
import orjson
import pytest

from rabbitq._amqp.topology import queue_depths

from .test_orphans import SERVICE, put, run

pytestmark = pytest.mark.broker

SUFFIXES = ("", ".dlq", ".retry.1s", ".retry.2s", ".retry.5s", ".retry.10m")


@pytest.fixture
async def quorum_service(tmp_path, uid, connection):
    (tmp_path / "service.py").write_text(SERVICE)
    queue = f"t.{uid}.prq"
    yield tmp_path, queue
    channel = await connection.channel()
    for suffix in SUFFIXES:
        await channel.queue_delete(queue + suffix)
    await channel.exchange_delete(queue)
    await channel.close()


async def test_prune_deletes_empty_quorum_retry_queues_and_keeps_busy_ones(
    quorum_service, broker_url, connection
):
    directory, queue = quorum_service
    code, _, err = await run(directory, "topology", "service:app", url=broker_url,
                             T_QUEUE=queue, T_DELAYS="1,2,600", T_TYPE="quorum")  # fmt: skip
    assert code == 0, err
    await put(connection, f"{queue}.retry.10m")
    channel = await connection.channel()
    busy = await channel.get_queue(f"{queue}.retry.2s", ensure=False)

    async def hold(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        await message.nack(requeue=True)

    tag = await busy.consume(hold)
    try:
        code, out, err = await run(directory, "topology", "service:app", "--prune", "--json",
                                   url=broker_url, T_QUEUE=queue, T_DELAYS="5",
                                   T_TYPE="quorum")  # fmt: skip
    finally:
        await busy.cancel(tag)
        await channel.close()

    assert code == 0, err
    assert "Traceback" not in err and "NOT_IMPLEMENTED" not in err
    rows = orjson.loads(out)  # one JSON array
    kept = {r["name"]: r for r in rows if r["kind"] in ("pruned", "kept")}
    assert {name: row["kind"] for name, row in kept.items()} == {
        f"{queue}.retry.10m": "kept",
        f"{queue}.retry.1s": "pruned",
        f"{queue}.retry.2s": "kept",
    }
    assert kept[f"{queue}.retry.10m"]["messages"] == 1
    assert kept[f"{queue}.retry.2s"]["consumers"] == 1
    one, two, ten = await queue_depths(
        connection,
        [(f"{queue}.retry.1s", "retry"), (f"{queue}.retry.2s", "retry"),
         (f"{queue}.retry.10m", "retry")],
    )  # fmt: skip
    assert not one.exists
    assert two.exists  # it had a consumer
    assert ten.exists and ten.messages == 1  # a queue with a message is never deleted


async def test_prune_prints_a_table_that_says_why_a_queue_was_kept(
    quorum_service, broker_url, connection
):
    directory, queue = quorum_service
    code, _, err = await run(directory, "topology", "service:app", url=broker_url,
                             T_QUEUE=queue, T_DELAYS="1,600", T_TYPE="quorum")  # fmt: skip
    assert code == 0, err
    channel = await connection.channel(publisher_confirms=True)
    await channel.default_exchange.publish(
        aio_pika.Message(b'{"n": 1}'), routing_key=f"{queue}.retry.10m"
    )
    await channel.close()

    code, out, err = await run(directory, "topology", "service:app", "--prune",
                               url=broker_url, T_QUEUE=queue, T_DELAYS="5",
                               T_TYPE="quorum")  # fmt: skip

    assert code == 0, err
    assert "empty, no handler uses it: deleted" in out
    assert "1 message(s) still in it" in out
