"""The console's message search (``/status``) and the status history on a DLQ message's
page, for an app with ``App(status=...)`` (the real Redis), escaped, read-only."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from rabbitq import App
from rabbitq.console import create_app
from rabbitq.console.security import Guard
from rabbitq.console.state import Config
from rabbitq.console.targets import from_app
from rabbitq.status import RedisStatus
from rabbitq.status.model import DEAD_LETTERED, PUBLISHED, RECEIVED, STARTED, SUCCEEDED, Record
from tests.helpers import REDIS_URL

from .broker import dead, declare_app, delete_app, publish
from .conftest import TOKEN, act, result, sign_in


@pytest.fixture
def status_app(broker_url: str, uid: str) -> Iterator[App]:
    prefix = f"rabbitq-test:{uuid.uuid4().hex}:status:"
    service = App(
        queue=f"t.{uid}.st",
        exchange=f"t.{uid}.x",
        url=broker_url,
        queue_type="classic",
        status=RedisStatus(REDIS_URL, key_prefix=prefix),
    )
    declare_app(broker_url, service)
    try:
        yield service
    finally:
        delete_app(broker_url, service)
        store = RedisStatus(REDIS_URL, key_prefix=prefix)

        async def drop() -> None:
            await store.drop()
            await store.close()

        asyncio.run(drop())


def write(app: App, message_id: str, error: str = "OSError: down") -> None:
    assert app.status_writer is not None
    store = app.status_writer.store

    async def go() -> None:
        await store.write(
            [
                Record(message_id, PUBLISHED, 100.0, None, {"type": "t.a"}),
                Record(message_id, RECEIVED, 101.0, 1, {"queue": app.queue}),
                Record(message_id, STARTED, 101.0, 1),
                Record(
                    message_id, DEAD_LETTERED, 102.0, 1, {"reason": "permanent", "error": error}
                ),
            ]
        )
        await store.close()

    asyncio.run(go())


def console(app: App, tmp_path: Path, statuses: list[tuple[str, App]]) -> TestClient:
    config = Config(
        targets=[from_app("svc:app", app)],
        url=app.resolved_url(),
        guard=Guard(token=TOKEN),
        export_dir=tmp_path,
        statuses=statuses,
    )
    return TestClient(create_app(config, sample=False), base_url="http://127.0.0.1:8080")


def test_the_overview_searches_and_the_status_page_shows_the_history(status_app, tmp_path):
    write(status_app, "m-1", error="ValueError: <script>alert(1)</script>\x1b[31m")
    with console(status_app, tmp_path, [("svc:app", status_app)]) as client:
        assert 'action="/status"' in client.get("/").text
        page = client.get("/status", params={"id": "m-1"})
        assert page.status_code == 200
        html = page.text
        assert "<code>dead_lettered</code>, 1 attempt(s) started" in html
        for state in ("published", "received", "started", "dead_lettered"):
            assert f"<td>{state}</td>" in html
        assert "1970-01-01 00:01:40.000 UTC" in html
        assert "<script>alert" not in html and "&lt;script&gt;" in html and "\x1b" not in html
        unknown = client.get("/status", params={"id": "<b>nope</b>"}).text
        assert "no status recorded" in unknown and "<b>nope" not in unknown


def test_the_dlq_message_page_shows_the_status_history(status_app, broker_url, tmp_path):
    write(status_app, "m00001")
    publish(broker_url, status_app.topology().dlq.name, [dead(status_app.queue, 1)])
    with console(status_app, tmp_path, [("svc:app", status_app)]) as client:
        listing = client.get(f"/q/{status_app.queue}").text
        key = listing.split(f"/q/{status_app.topology().dlq.name}/m/")[1].split('"')[0]
        html = client.get(f"/q/{status_app.queue}/m/{key}").text
        assert "Status history" in html and "<td>dead_lettered</td>" in html


def test_a_status_store_that_is_down_is_one_line_on_the_page(status_app, tmp_path):
    down = App(queue="x", status=RedisStatus("redis://127.0.0.1:1/0", timeout=0.5))
    with console(status_app, tmp_path, [("down:app", down)]) as client:
        page = client.get("/status", params={"id": "m-1"})
        assert page.status_code == 200 and "status store unreadable: StoreUnavailable" in page.text


def test_without_a_status_store_there_is_no_search(status_app, tmp_path):
    with console(status_app, tmp_path, []) as client:
        assert 'action="/status"' not in client.get("/").text
        assert "has a status store" in client.get("/status").text


def test_replays_and_purges_from_the_console_are_recorded(status_app, broker_url, tmp_path):
    dlq_name = status_app.topology().dlq.name
    publish(broker_url, dlq_name, [dead(status_app.queue, 1), dead(status_app.queue, 2)])
    with console(status_app, tmp_path, [("svc:app", status_app)]) as client:
        sign_in(client)
        listing = client.get(f"/q/{status_app.queue}").text
        keys = [part.split('"')[0] for part in listing.split(f"/q/{dlq_name}/m/")[1:]]
        first = client.get(f"/q/{status_app.queue}/m/{keys[0]}").text
        assert result(act(client, first, status_app.queue, "replay:one"), "done") == 1
        rest = client.get(f"/q/{status_app.queue}").text
        assert result(act(client, rest, status_app.queue, "purge:filter"), "done") == 1
        states = {}
        for mid in ("m00001", "m00002"):
            page = client.get("/status", params={"id": mid}).text
            states[mid] = "<td>replayed</td>" in page, "<td>purged</td>" in page
    assert sorted(states.values()) == [(False, True), (True, False)]


def test_a_group_id_shows_the_workflow_members_by_state_and_the_callback(status_app, tmp_path):
    assert status_app.status_writer is not None
    store = status_app.status_writer.store
    gid = f"g-{uuid.uuid4().hex}"
    hostile = "m-<b>\x1b[31m"
    records = [
        Record("m-ok", PUBLISHED, 100.0, None, {"type": "capture"}, gid),
        Record("m-ok", SUCCEEDED, 101.0, 1, {}, gid),
        Record(hostile, PUBLISHED, 100.0, None, {"type": "<i>capture</i>"}, gid),
        Record(hostile, DEAD_LETTERED, 102.0, 1, {"reason": "permanent"}, gid),
        Record("m-cb", PUBLISHED, 103.0, None, {"type": "receipt"}, None, gid),
    ]

    async def go() -> None:
        await store.write(records)
        await store.close()

    asyncio.run(go())
    with console(status_app, tmp_path, [("svc:app", status_app)]) as client:
        html = client.get("/status", params={"id": gid}).text
        assert f"Workflow <code>{gid}</code>" in html and "History of" not in html
        assert "svc:app: 1 of 2 member(s) succeeded" in html and "complete</span>" not in html
        assert '<progress value="1" max="2">' in html
        assert "<li>succeeded <b>1</b></li>" in html and "<li>dead_lettered <b>1</b></li>" in html
        callback = '<a href="/status?id=m-cb"><code>m-cb</code></a></td><td>receipt</td>'
        assert callback + "<td>published</td>" in html
        first = html.index("m-&lt;b&gt;\\x1b[31m")  # escaped, and listed before the one done
        assert first < html.index('href="/status?id=m-ok"')
        assert 'href="/status?id=m-%3Cb%3E%1B%5B31m"' in html
        assert "<b>\x1b" not in html and "<i>capture" not in html and "&lt;i&gt;capture" in html
        member = client.get("/status", params={"id": "m-ok"}).text
        assert "History of <code>m-ok</code>" in member and "<td>succeeded</td>" in member
