"""The console's cancel action (``App(cancellable=True)``, the real Redis): a button on
the status page of a message that has not finished, a confirmation page, then the
cancel's one-line answer; signed in and with the CSRF token only, never read-only, and
no button for a finished message."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from starlette.testclient import TestClient

from rabbitq import App
from rabbitq.backends import RedisBackend
from rabbitq.console import create_app
from rabbitq.console.security import Guard
from rabbitq.console.state import Config
from rabbitq.console.targets import from_app
from rabbitq.status.model import PUBLISHED, SUCCEEDED, Record
from tests.helpers import REDIS_URL

from .conftest import TOKEN, csrf_of, sign_in


@pytest.fixture
def cancellable(broker_url: str, uid: str) -> Iterator[App]:
    prefix = f"rabbitq-test:{uuid.uuid4().hex}:"
    app = App(
        queue=f"t.{uid}.cn",
        exchange=f"t.{uid}.x",
        url=broker_url,
        queue_type="classic",
        backend=RedisBackend(REDIS_URL, key_prefix=prefix),
        cancellable=True,
    )
    yield app

    async def drop() -> None:
        client = aioredis.Redis.from_url(REDIS_URL)
        async for name in client.scan_iter(match=prefix + "*"):
            await client.delete(name)
        await client.aclose()

    asyncio.run(drop())


def write(app: App, *records: Record) -> None:
    assert app.status_writer is not None
    store = app.status_writer.store

    async def go() -> None:
        await store.write(list(records))
        await store.close()

    asyncio.run(go())


def console(app: App, tmp_path: Path, *, read_only: bool = False) -> TestClient:
    config = Config(
        targets=[from_app("svc:app", app)],
        url=app.resolved_url(),
        guard=Guard(token=TOKEN, read_only=read_only),
        export_dir=tmp_path,
        statuses=[("svc:app", app)],
    )
    return TestClient(create_app(config, sample=False), base_url="http://127.0.0.1:8080")


def test_a_pending_message_is_cancelled_from_its_status_page(cancellable, tmp_path):
    write(cancellable, Record("m-wait", PUBLISHED, 100.0, None, {"type": "t.a"}))
    with console(cancellable, tmp_path) as client:
        assert "data-cancel" not in client.get("/status?id=m-wait").text  # not signed in
        sign_in(client)
        page = client.get("/status?id=m-wait").text
        assert "data-cancel" in page
        form = {"csrf": csrf_of(page), "app": "svc:app", "id": "m-wait"}
        assert client.post("/cancel/run", data={**form, "csrf": "0" * 32}).status_code == 403
        confirm = client.post("/cancel/confirm", data=form)
        assert confirm.status_code == 200 and "Yes, cancel it" in confirm.text
        done = client.post("/cancel/run", data=form)
        assert done.status_code == 200
        assert 'data-cancel-outcome="cancelled"' in done.text
        after = client.get("/status?id=m-wait").text
        assert "<code>cancelled</code>" in after and "data-cancel" not in after
        again = client.post("/cancel/run", data=form)
        assert 'data-cancel-outcome="already-cancelled"' in again.text


def test_no_cancel_for_a_finished_message_nor_read_only(cancellable, tmp_path):
    write(
        cancellable,
        Record("m-done", PUBLISHED, 100.0, None, {"type": "t.a"}),
        Record("m-done", SUCCEEDED, 101.0, 1),
    )
    with console(cancellable, tmp_path) as client:
        sign_in(client)
        assert "data-cancel" not in client.get("/status?id=m-done").text
        page = client.get("/status?id=m-other").text
        form = {"csrf": csrf_of(page), "app": "svc:nope", "id": "m-done"}
        assert client.post("/cancel/confirm", data=form).status_code == 400
    write(cancellable, Record("m-wait", PUBLISHED, 100.0, None, {"type": "t.a"}))
    with console(cancellable, tmp_path, read_only=True) as client:
        sign_in(client)
        page = client.get("/status?id=m-wait").text
        assert "data-cancel" not in page
        form = {"csrf": "x", "app": "svc:app", "id": "m-wait"}
        assert client.post("/cancel/run", data=form).status_code == 403
