"""``rabbitq dlq purge --app`` and ``rabbitq dlq replay --app`` record their work in the
app's status store, and ``rabbitq status`` reads it back (the shared broker and Redis)."""

from __future__ import annotations

import asyncio
import logging
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from rabbitq import App
from rabbitq.cli import main
from rabbitq.status import RedisStatus
from rabbitq.status.model import Record
from tests.console.broker import dead, declare_app, delete_app, publish
from tests.helpers import REDIS_URL

pytestmark = [pytest.mark.broker]


@pytest.fixture
def service(
    tmp_path: Path, broker_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[App, str]]:
    """An app with a status store in a module of its own: (the app, its MODULE:APP)."""
    uid = uuid.uuid4().hex[:10]
    prefix = f"rabbitq-test:{uid}:status:"
    module = f"rq_status_cli_{uid}"
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(f"""
            from rabbitq import App
            from rabbitq.status import RedisStatus

            app = App(
                queue="t.{uid}.q", exchange="t.{uid}.x", url={broker_url!r}, queue_type="classic",
                status=RedisStatus({REDIS_URL!r}, key_prefix={prefix!r}),
            )
        """)
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    app = __import__(module).app
    declare_app(broker_url, app)
    try:
        yield app, f"{module}:app"
    finally:
        delete_app(broker_url, app)
        sys.modules.pop(module, None)
        root.handlers[:], level = saved
        root.setLevel(level)
        store = RedisStatus(REDIS_URL, key_prefix=prefix)

        async def drop() -> None:
            await store.drop()
            await store.close()

        asyncio.run(drop())


def test_purge_and_replay_with_app_are_in_the_status(service, broker_url):
    app, spec = service
    dlq_name = app.topology().dlq.name
    publish(broker_url, dlq_name, [dead(app.queue, 1, message_id="gone-1")])
    publish(broker_url, dlq_name, [dead(app.queue, 2, message_id="back-2")])
    runner = CliRunner()
    url = ["--url", broker_url]
    replayed = runner.invoke(
        main, ["dlq", "replay", app.queue, "--message-id", "back-2", "--app", spec, *url]
    )
    assert replayed.exit_code == 0, replayed.output
    purged = runner.invoke(main, ["dlq", "purge", app.queue, "--yes", "--app", spec, *url])
    assert purged.exit_code == 0, purged.output
    expected = (("gone-1", "purged", dlq_name), ("back-2", "replayed", app.queue))
    for message_id, state, queue in expected:
        shown = runner.invoke(main, ["status", spec, message_id, "--json"])
        assert shown.exit_code == 0, shown.output
        data = orjson.loads(shown.output)
        assert data["state"] == state
        assert data["history"][-1]["detail"] == {"queue": queue}


def test_a_retry_says_when_the_next_attempt_is_due_as_an_iso_time(service):
    app, spec = service
    assert app.status_writer is not None
    store = app.status_writer.store
    at = 1795788600.5  # 2026-11-27T14:10:00.500Z
    retrying = Record(message_id="late-1", state="retrying", at=at, attempt=1,
                      detail={"delay": "10s", "next_at": at + 10.22})  # fmt: skip

    async def write() -> None:
        await store.write([Record(message_id="late-1", state="received", at=at - 1), retrying])
        await store.close()

    asyncio.run(write())

    shown = CliRunner().invoke(main, ["status", spec, "late-1"])

    assert shown.exit_code == 0, shown.output
    (line,) = [x for x in shown.output.splitlines() if "next_at" in x]
    assert line.endswith("delay=10s next_at=2026-11-27T14:10:10.720Z"), line


def test_purge_with_app_frees_the_unique_keys_of_what_it_deletes(service, broker_url):
    from rabbitq.unique.setup import key_store

    app, spec = service
    assert app.status_writer is not None
    keys = key_store(app.status_writer.store)  # beside the status store: same Redis
    assert keys is not None

    async def take(key: str, message_id: str) -> str | None:
        try:
            held = await keys.take(key, message_id, 3600)
            return None if held is None else held.message_id
        finally:
            await keys.close()

    assert asyncio.run(take("capture:9", "gone-9")) is None
    held = dead(app.queue, 9, message_id="gone-9")
    held.headers["rabbitq-unique-key"] = "capture:9"
    publish(broker_url, app.topology().dlq.name, [held, dead(app.queue, 10, message_id="x")])
    assert asyncio.run(take("capture:9", "again")) == "gone-9"  # dead-lettered: held
    purged = CliRunner().invoke(
        main, ["dlq", "purge", app.queue, "--yes", "--app", spec, "--url", broker_url]
    )
    assert purged.exit_code == 0, purged.output
    assert asyncio.run(take("capture:9", "again")) is None  # purged: freed
    assert asyncio.run(take("capture:9", "third")) == "again"
