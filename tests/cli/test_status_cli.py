"""``rabbitq status MODULE:APP MESSAGE_ID``: a message's history as text or JSON, and a
one-line error for an unknown message, an app without a status store, a store that is
down."""

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
from click.testing import CliRunner, Result

from rabbitq.cli import main
from rabbitq.status import RedisStatus
from rabbitq.status.model import (
    DEAD_LETTERED,
    PUBLISHED,
    RECEIVED,
    RETRYING,
    STARTED,
    SUCCEEDED,
    Record,
)
from tests.helpers import REDIS_URL, service_fixture

PREFIX = f"rabbitq-test:{uuid.uuid4().hex}:status:"
SOURCE = f"""
    from rabbitq import App
    from rabbitq.status import RedisStatus

    app = App(queue="unit-status", status=RedisStatus({REDIS_URL!r}, key_prefix={PREFIX!r}))
    down = App(queue="unit-status", status=RedisStatus("redis://127.0.0.1:1/0", timeout=0.5))
    plain = App(queue="unit-status")
"""


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("status_app")
    (directory / "rq_unit_status_app.py").write_text(textwrap.dedent(SOURCE))
    yield directory
    sys.modules.pop("rq_unit_status_app", None)


@pytest.fixture(autouse=True)
def in_app_dir(app_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(app_dir)
    monkeypatch.syspath_prepend(str(app_dir))
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    yield
    root.handlers[:], level = saved
    root.setLevel(level)


@pytest.fixture(scope="module")
@service_fixture
def message_id() -> Iterator[str]:
    store = RedisStatus(REDIS_URL, key_prefix=PREFIX)
    mid = uuid.uuid4().hex
    records = [
        Record(mid, PUBLISHED, 100.0, None, {"type": "email.send"}),
        Record(mid, RECEIVED, 100.5, 1, {"queue": "emails"}),
        Record(mid, STARTED, 100.5, 1),
        Record(mid, RETRYING, 101.0, 1, {"delay": "10s", "error": "OSError: down"}),
    ]

    async def write() -> None:
        await store.write(records)
        await store.close()

    async def drop() -> None:
        await store.drop()
        await store.close()

    asyncio.run(write())
    yield mid
    asyncio.run(drop())


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_status_prints_the_state_and_one_line_per_entry(message_id):
    result = run("status", "rq_unit_status_app:app", message_id)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"message {message_id}: retrying (1 attempt(s) started)"
    assert len(lines) == 5
    assert "retrying" in lines[4] and "delay=10s" in lines[4] and "error=OSError: down" in lines[4]


def test_status_json_is_one_object(message_id):
    result = run("status", "rq_unit_status_app:app", message_id, "--json")
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.output)
    assert data["state"] == "retrying" and data["attempts"] == 1
    assert [e["state"] for e in data["history"]] == [PUBLISHED, RECEIVED, STARTED, RETRYING]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(  # asks the real Redis
            "rq_unit_status_app:app",
            "no status for message or group 'nope'",
            marks=pytest.mark.services,
        ),
        ("rq_unit_status_app:plain", "has no status store: App(status=...)"),
        ("rq_unit_status_app:down", "RedisStatus('redis://127.0.0.1:1/0'"),
        ("no_such_module:app", "no such module"),
    ],
)
def test_status_failures_are_one_line(spec, message):
    result = run("status", spec, "nope")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], lines


def test_status_help_has_an_example():
    result = run("status", "--help")
    assert result.exit_code == 0 and "Examples:" in result.output
    assert "\n      rabbitq status myservice:app " in result.output  # whole, to paste


@pytest.mark.services  # the real PostgreSQL and Redis
def test_effects_init_creates_the_status_table_and_checks_redis(tmp_path, monkeypatch):
    import psycopg

    prefix = f"t_{uuid.uuid4().hex[:10]}_"
    pg_url = "postgresql://postgres@127.0.0.1:5432/test"
    (tmp_path / "rq_unit_status_init.py").write_text(
        textwrap.dedent(f"""
            from rabbitq import App
            from rabbitq.effects import PostgresStore, RedisStore

            pg = App(queue="unit-status", status=PostgresStore({pg_url!r}, prefix={prefix!r}))
            redis = App(queue="unit-status", status=RedisStore({REDIS_URL!r}))
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        pg = run("effects", "init", "rq_unit_status_init:pg")
        redis = run("effects", "init", "rq_unit_status_init:redis")
        assert pg.exit_code == 0 and "ready: PostgresStatus(" in pg.output, pg.output
        assert redis.exit_code == 0 and "ready: RedisStatus(" in redis.output, redis.output
        with psycopg.connect(pg_url, autocommit=True) as conn:
            found = conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename = %s", (prefix + "status",)
            ).fetchall()
            conn.execute(f'DROP TABLE IF EXISTS "{prefix}status"')
        assert found == [(prefix + "status",)]
    finally:
        sys.modules.pop("rq_unit_status_init", None)


@pytest.fixture(scope="module")
@service_fixture
def group_id() -> Iterator[str]:
    """A group of 60 members (one dead-lettered) and its callback, in the store."""
    store = RedisStatus(REDIS_URL, key_prefix=PREFIX)
    gid = uuid.uuid4().hex
    records = [
        Record(f"{gid}-{i:02}", SUCCEEDED if i else DEAD_LETTERED, 100.0 + i, 1, {}, gid)
        for i in range(60)
    ]
    records.append(Record(f"{gid}-cb", PUBLISHED, 200.0, None, {"type": "receipt"}, None, gid))

    async def write() -> None:
        await store.write(records)
        await store.close()

    asyncio.run(write())
    return gid  # dropped with the module's store (message_id's fixture)


def test_status_of_a_group_counts_its_members_and_lists_the_first(group_id, message_id):
    result = run("status", "rq_unit_status_app:app", group_id)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"group {group_id}: 60 member(s), 59 succeeded, not complete"
    assert lines[1] == "members by state: succeeded 59, dead_lettered 1"
    assert lines[2] == f"callback {group_id}-cb (receipt): published"
    assert lines[4].split()[:2] == [f"{group_id}-00", "dead_lettered"]  # not succeeded first
    assert lines[-1] == "  … and 10 more" and len(lines) == 4 + 50 + 1


def test_status_of_a_group_as_json_lists_every_member_read(group_id, message_id):
    result = run("status", "rq_unit_status_app:app", group_id, "--json")
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.output)
    assert data["total"] == data["read"] == 60 and data["complete"] is False
    assert data["counts"] == {"succeeded": 59, "dead_lettered": 1}
    assert len(data["members"]) == 60 and data["callbacks"][0]["state"] == "published"
