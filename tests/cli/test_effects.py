"""``rabbitq effects init`` and ``rabbitq outbox relay``, driven through click."""

from __future__ import annotations

import importlib
import sys
import uuid

import psycopg
import pytest
from click.testing import CliRunner

from rabbitq.cli import main
from tests.helpers import service_fixture

from ..effects.conftest import PG_URL


@pytest.fixture
@service_fixture
def service(monkeypatch):
    """tests.effects.once_service imported afresh with a table prefix of this test's own."""
    prefix = f"t_{uuid.uuid4().hex[:10]}_"
    monkeypatch.setenv("ONCE_PREFIX", prefix)
    monkeypatch.setenv("ONCE_OUTBOX", "1")
    monkeypatch.setenv("ONCE_MODE", "tx")
    sys.modules.pop("tests.effects.once_service", None)
    importlib.import_module("tests.effects.once_service")
    yield prefix
    sys.modules.pop("tests.effects.once_service", None)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for (name,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (prefix + "%",)
        ).fetchall():
            conn.execute(f'DROP TABLE "{name}"')


def test_effects_init_creates_the_store_and_outbox_tables(service):
    result = CliRunner().invoke(main, ["effects", "init", "tests.effects.once_service:app"])

    assert result.exit_code == 0, result.output
    assert result.output.count("ready:") == 3
    assert "ready: broker amqp://" in result.output  # the outbox relay's broker answers
    with psycopg.connect(PG_URL) as conn:
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (service + "%",)
            )
        }
    assert tables == {service + "idempotency", service + "outbox"}


def test_effects_init_and_the_relay_refuse_an_app_without_them():
    runner = CliRunner()
    init = runner.invoke(main, ["effects", "init", "examples.email_service:app"])
    relay = runner.invoke(main, ["outbox", "relay", "examples.email_service:app"])

    assert init.exit_code == 1 and "no idempotency store, outbox or status store" in init.output
    assert relay.exit_code == 1 and "has no outbox" in relay.output
