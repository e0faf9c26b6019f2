"""The worker's log lines name things as the user does (issue 25, item 9): the orphan
warning gives the app's real ``MODULE:APP``, and a message of a type nobody handles is
logged with that type, not as ``unknown`` (the metrics' bounded label)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import aio_pika
import pytest

from rabbitq import Message, Worker

from ..helpers import running, wait_for
from .test_orphans import SERVICE, run

pytestmark = pytest.mark.broker


@pytest.fixture
async def orphan_service(tmp_path, uid, connection):
    (tmp_path / "service.py").write_text(SERVICE)
    queue = f"t.{uid}.names"
    yield tmp_path, queue
    channel = await connection.channel()
    for suffix in ("", ".dlq", ".retry.1s", ".retry.2s"):
        await channel.queue_delete(queue + suffix)
    await channel.exchange_delete(queue)
    await channel.close()


async def test_the_orphan_warning_names_the_app_as_it_was_started(orphan_service, broker_url):
    directory, queue = orphan_service
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
    (warning,) = [line for line in seen if " WARNING " in line]
    assert "'rabbitq topology service:app --prune'" in warning
    assert "MODULE:APP" not in warning
    assert not [line for line in seen if "behaviour" in line]  # broker facts: DEBUG only


class Known(Message, type="t.lognames.known"):
    n: int


async def test_a_message_of_an_unhandled_type_is_logged_with_its_type(make_app, connection, caplog):
    app = make_app()

    @app.handler(Known)
    async def known(msg: Known) -> None:
        pass

    caplog.set_level(logging.INFO, logger="rabbitq.worker")
    async with running(Worker(app)):
        channel = await connection.channel(publisher_confirms=True)
        await channel.default_exchange.publish(
            aio_pika.Message(b"{}", type="t.lognames.sms.send", message_id="sms-1"),
            routing_key=app.queue,
        )
        await channel.close()
        await wait_for(lambda: "sms-1" in caplog.text)
    (line,) = [r.getMessage() for r in caplog.records if "sms-1" in r.getMessage()]
    assert line.startswith("message sms-1 (t.lognames.sms.send) dead-lettered to ")
