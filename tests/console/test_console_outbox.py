"""The console's outbox page: each app's outbox with its pending count and the rows the
broker refused (escaped), read-only, against the real PostgreSQL."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest
from starlette.testclient import TestClient

from rabbitq import App
from rabbitq.console import create_app
from rabbitq.console.security import Guard
from rabbitq.console.state import Config
from rabbitq.console.targets import from_app
from rabbitq.effects import Outbox
from tests.helpers import service_fixture

from ..effects.conftest import PG_URL
from .conftest import TOKEN


@pytest.fixture
@service_fixture
def outbox(tmp_path: Path):
    prefix = f"t_{uuid.uuid4().hex[:10]}_"
    app = App(queue=f"t.{prefix}q", exchange=f"t.{prefix}x")
    box = Outbox(PG_URL, app=app, prefix=prefix)
    yield app, box
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{box.sql.table}"')


def console(app: App, outboxes, tmp_path: Path) -> TestClient:
    config = Config(
        targets=[from_app("svc:app", app)],
        url="amqp://guest:guest@127.0.0.1:5672/",
        guard=Guard(token=TOKEN),
        export_dir=tmp_path,
        outboxes=outboxes,
    )
    return TestClient(create_app(config, sample=False), base_url="http://127.0.0.1:8080")


def test_the_outbox_page_lists_the_refused_rows_and_how_to_act_on_them(outbox, tmp_path):
    app, box = outbox
    with console(app, [("svc:app", box)], tmp_path) as client:
        empty = client.get("/outbox")
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for i, kind in enumerate(["stray.a", "ok.b", "stray.a"]):
                conn.execute(
                    f"INSERT INTO {box.sql.table} (exchange, routing_key, message_id, type,"
                    " body, order_key) VALUES ('x', %s, %s, %s, '{}', 'k\x1b1')",
                    (kind, f"m{i}", kind),
                )
            conn.execute(
                f"UPDATE {box.sql.table} SET attempts = 3, next_attempt_at = now() + interval"
                " '20 s', last_error = 'no queue is bound <b>\x1b[31m' WHERE type = 'stray.a'"
            )
        page = client.get("/outbox")
        overview = client.get("/")

    assert empty.status_code == 200 and "0 pending row(s)" in empty.text
    assert page.status_code == 200
    assert "3 pending row(s)" in page.text and page.text.count("<td>stray.a</td>") == 2
    assert "ok.b" not in page.text  # only the refused rows are listed
    assert "no queue is bound &lt;b&gt;\\x1b[31m" in page.text and "\x1b" not in page.text
    assert "rabbitq outbox retry svc:app --failing" in page.text
    assert 'href="/outbox"' in overview.text


def test_an_unreachable_outbox_database_is_one_line_on_the_page(tmp_path):
    app = App(queue="t.unreachable.q", exchange="t.unreachable.x")
    box = Outbox("postgresql://postgres:secret@127.0.0.1:1/test", app=app)
    box.db.timeout = 1
    with console(app, [("svc:app", box)], tmp_path) as client:
        page = client.get("/outbox")
    assert page.status_code == 200
    (alert,) = [line for line in page.text.splitlines() if 'class="alert"' in line]
    assert "cannot read postgresql://postgres:***@127.0.0.1:1/test" in alert
    assert "secret" not in page.text


def test_without_an_outbox_the_page_says_so_and_the_overview_has_no_link(tmp_path):
    app = App(queue="t.none.q", exchange="t.none.x")
    with console(app, [], tmp_path) as client:
        page, overview = client.get("/outbox"), client.get("/")
    assert "None of this console's apps has an outbox." in page.text
    assert 'href="/outbox"' not in overview.text


def test_rabbitq_console_for_an_app_with_an_outbox_serves_its_outbox_page(broker_url):
    from .test_console_cli import _get, _start, _stop

    prefix = f"t_{uuid.uuid4().hex[:10]}_"
    env = {
        "RABBITQ_URL": broker_url,
        "ONCE_URL": broker_url,
        "ONCE_PREFIX": prefix,
        "ONCE_OUTBOX": "1",
        "ONCE_QUEUE": f"t.{prefix}q",
        "ONCE_EXCHANGE": f"t.{prefix}x",
    }
    process = _start("tests.effects.once_service:app", "--read-only", env=env)
    try:
        page = _get(process.port, "/outbox")
    finally:
        _stop(process)
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{prefix}outbox"')
    assert f'tests.effects.once_service:app <span class="muted">({prefix}outbox)' in page
    assert "0 pending row(s)" in page
