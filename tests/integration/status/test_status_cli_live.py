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
