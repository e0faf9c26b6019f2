"""``rabbitq outbox list / retry / discard``, driven through click against the real
PostgreSQL: rows listed with their tries and last error, backoff ended, rows deleted."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from click.testing import CliRunner

from rabbitq.cli import main
from rabbitq.cli.outbox_rows import render
from rabbitq.effects.pending import PendingRow, Selection
from tests.helpers import service_fixture

from ..effects.conftest import PG_URL

APP = "tests.effects.once_service:app"


@pytest.fixture
@service_fixture
def outbox_table(monkeypatch):
    """once_service imported afresh with an outbox of this test's own, holding 3 rows:
    1 and 2 unroutable (failed twice, waiting), 3 never tried."""
    prefix = f"t_{uuid.uuid4().hex[:10]}_"
    monkeypatch.setenv("ONCE_PREFIX", prefix)
    monkeypatch.setenv("ONCE_OUTBOX", "1")
    monkeypatch.setenv("ONCE_MODE", "tx")
    sys.modules.pop("tests.effects.once_service", None)
    service = importlib.import_module("tests.effects.once_service")
    asyncio.run(_open(service.app.outbox))
    table = prefix + "outbox"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for i, (kind, key) in enumerate([("stray.a", "k1"), ("stray.a", None), ("ok.b", "k1")]):
            conn.execute(
                f"INSERT INTO {table} (exchange, routing_key, message_id, type, body, order_key)"
                " VALUES ('x', %s, %s, %s, '{}', %s)",
                (kind, f"m{i + 1}", kind, key),
            )
        conn.execute(
            f"UPDATE {table} SET attempts = 2, next_attempt_at = now() + interval '50 s',"
            " last_error = 'no queue is bound to exchange ''x'' with routing key ''stray.a'''"
            " WHERE type = 'stray.a'"
        )
    yield table
    sys.modules.pop("tests.effects.once_service", None)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for (name,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (prefix + "%",)
        ).fetchall():
            conn.execute(f'DROP TABLE "{name}"')


async def _open(outbox) -> None:
    await outbox.open()
    await outbox.close()


def _rows(table: str) -> list[tuple]:
    with psycopg.connect(PG_URL) as conn:
        return conn.execute(
            f"SELECT id, next_attempt_at IS NULL FROM {table} ORDER BY id"
        ).fetchall()


def test_a_selection_is_sql_with_parameters_and_acting_on_all_must_be_said() -> None:
    where, params = Selection(ids=(1, 2), type="t", failing=True).where()
    assert params == {"ids": [1, 2], "type": "t"}
    assert "attempts > 0" in where.as_string(None)
    with pytest.raises(Exception, match="say which rows to discard"):
        Selection().check_acting("discard")
    Selection(everything=True).check_acting("discard")


def test_the_listing_shows_tries_age_next_try_and_the_whole_error() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    row = PendingRow(
        7,
        "stray.a",
        None,
        "m",
        3,
        now - timedelta(seconds=200),
        now + timedelta(seconds=7),
        "no queue\nis bound",
    )
    header, line = render([row], now)
    assert header.split() == ["ID", "TYPE", "KEY", "TRIES", "AGE", "NEXT", "TRY", "LAST", "ERROR"]
    assert line.split() == [
        "7",
        "stray.a",
        "-",
        "3",
        "3m20s",
        "in",
        "8s",
        "no",
        "queue",
        "is",
        "bound",
    ]


def test_outbox_list_shows_pending_rows_and_the_failing_ones(outbox_table) -> None:
    runner = CliRunner()
    everything = runner.invoke(main, ["outbox", "list", APP])
    failing = runner.invoke(main, ["outbox", "list", APP, "--failing", "--json"])

    assert everything.exit_code == 0, everything.output
    lines = everything.output.splitlines()
    assert len(lines) == 4 and lines[0].startswith("ID")
    assert "no queue is bound" in lines[1] and " in " in lines[1] and "now" in lines[3]
    assert failing.exit_code == 0, failing.output
    rows = json.loads(failing.output)  # one document: the rows, as an array
    assert [row["type"] for row in rows] == ["stray.a", "stray.a"]


def test_outbox_retry_ends_the_backoff_of_the_selected_rows(outbox_table) -> None:
    result = CliRunner().invoke(main, ["outbox", "retry", APP, "--id", "1"])

    assert result.exit_code == 0, result.output
    assert "1 row(s) will be tried at once" in result.output
    assert _rows(outbox_table) == [(1, True), (2, False), (3, True)]


def test_outbox_discard_deletes_the_selected_rows_and_prints_each(outbox_table) -> None:
    result = CliRunner().invoke(main, ["outbox", "discard", APP, "--type", "stray.a", "--yes"])

    assert result.exit_code == 0, result.output
    assert "discarded row 1 (stray.a) message_id m1" in result.output
    assert result.output.strip().endswith("2 row(s) discarded")
    assert [r[0] for r in _rows(outbox_table)] == [3]


def test_acting_without_a_selection_or_confirmation_is_a_one_line_error(outbox_table) -> None:
    runner = CliRunner()
    unselected = runner.invoke(main, ["outbox", "discard", APP, "--yes"])
    unconfirmed = runner.invoke(main, ["outbox", "discard", APP, "--failing"])
    no_outbox = runner.invoke(main, ["outbox", "list", "examples.email_service:app"])

    assert unselected.exit_code == 1
    assert unselected.output.strip().splitlines() == [
        "Error: say which rows to discard: --id N, --type TYPE, --failing, or --all"
    ]
    assert unconfirmed.exit_code == 1 and "without --yes" in unconfirmed.output
    assert no_outbox.exit_code == 1 and len(no_outbox.output.strip().splitlines()) == 1
    assert len(_rows(outbox_table)) == 3
