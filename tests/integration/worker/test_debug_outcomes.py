"""At DEBUG a worker logs one line per message handled, as it already does (at INFO and
WARNING) for each retry and dead letter (issue 12, item 10)."""

from __future__ import annotations

import logging

import pytest

from rabbitq import App, Message, RetryPolicy, Worker
from tests.helpers import Recorder, delete_app_objects, running, wait_for

pytestmark = pytest.mark.broker


class Note(Message, type="t.debuglog.note"):
    n: int


async def test_each_handled_message_logs_one_debug_line(broker_url, uid, connection, caplog):
    app = App(queue=f"t.{uid}.debuglog", exchange=f"t.{uid}.x", retry=RetryPolicy(delays=()))

    @app.handler(Note)
    async def note(msg: Note) -> None:
        pass

    recorder = Recorder()
    ids: list[str] = []
    try:
        with caplog.at_level(logging.DEBUG, logger="rabbitq"):
            async with running(Worker(app, url=broker_url, hooks=recorder)):
                async with app.publisher(url=broker_url) as pub:
                    for i in range(3):
                        ids.append(await pub.publish(Note(n=i)))
                await wait_for(lambda: recorder.count("succeeded") == 3)
    finally:
        await delete_app_objects(connection, app)
    debug = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.DEBUG and r.name.startswith("rabbitq")
    ]
    for mid in ids:
        lines = [line for line in debug if mid in line]
        assert len(lines) == 1, debug
        assert "handled" in lines[0] and "t.debuglog.note" in lines[0]
