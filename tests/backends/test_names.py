"""One backend per store kind, without a service: the tables and keys a backend's stores
use are the ones the stores derived from each other before backends existed; companions
are found by a store's location, never by its class name; App(backend=...) takes them."""

from __future__ import annotations

import sys

import pytest

from rabbitq import App, ConfigurationError, Message
from rabbitq.backends import PostgresBackend, RedisBackend
from rabbitq.effects import PostgresStore, RedisStore
from rabbitq.status import PostgresStatus, RedisStatus
from rabbitq.status.backend import status_store
from rabbitq.workflow.chords import chord_store
from rabbitq.workflow.chords_pg import PostgresChords
from rabbitq.workflow.chords_redis import RedisChords

DSN = "postgresql://nobody@127.0.0.1:1/none"  # never connected to here
URL = "redis://127.0.0.1:1/0"


class Job(Message, type="test.backends.job"):
    n: int = 0


def _pg_chain(store: PostgresStore) -> tuple[str, str, str]:
    status = status_store(store)
    chords = chord_store(status)
    assert isinstance(status, PostgresStatus) and isinstance(chords, PostgresChords)
    return store.sql.table, status.sql.table, chords.prefix


def _redis_chain(store: RedisStore) -> tuple[str, str, str]:
    status = status_store(store)
    chords = chord_store(status)
    assert isinstance(status, RedisStatus) and isinstance(chords, RedisChords)
    return store.key_prefix, status.key_prefix, chords.key_prefix


@pytest.mark.parametrize("prefix", ["rabbitq_", "svc_"])
def test_a_postgres_backend_names_its_tables_as_the_stores_always_did(prefix):
    backend = PostgresBackend(DSN, prefix=prefix)
    made = (
        backend.idempotency().sql.table,
        backend.status().sql.table,
        backend.chords().prefix,
    )
    assert made == _pg_chain(PostgresStore(DSN, prefix=prefix))
    assert made == (prefix + "idempotency", prefix + "status", prefix)
    assert backend.outbox(App(queue="q")).sql.table == prefix + "outbox"


def test_the_default_postgres_tables_are_rabbitqs():
    assert _pg_chain(PostgresStore(DSN)) == ("rabbitq_idempotency", "rabbitq_status", "rabbitq_")


@pytest.mark.parametrize(
    ("base", "store_prefix"),
    [("rabbitq:", "rabbitq:idem:"), ("t:x:", "t:x:idem:")],
)
def test_a_redis_backend_names_its_keys_as_the_stores_always_did(base, store_prefix):
    backend = RedisBackend(URL, key_prefix=base)
    made = (
        backend.idempotency().key_prefix,
        backend.status().key_prefix,
        backend.chords().key_prefix,
    )
    assert made == _redis_chain(RedisStore(URL, key_prefix=store_prefix))
    assert made == (base + "idem:", base + "status:", base + "wf:")


def test_a_redis_key_prefix_without_its_kind_is_the_base_of_the_companions():
    # as before: "custom:" (no "idem:") gives "custom:status:" and then "custom:wf:"
    assert _redis_chain(RedisStore(URL, key_prefix="custom:")) == (
        "custom:",
        "custom:status:",
        "custom:wf:",
    )
    chords = chord_store(RedisStatus(URL, key_prefix="s"))
    assert isinstance(chords, RedisChords) and chords.key_prefix == "swf:"


def test_the_backend_shares_retention_and_timeout_with_every_store():
    pg = PostgresBackend(DSN, retention=60, timeout=2.5)
    assert pg.idempotency().retention == pg.status().retention == pg.chords().retention == 60
    assert pg.idempotency().db.timeout == pg.status().db.timeout == pg.chords().db.timeout == 2.5
    rs = RedisBackend(URL, retention=60, timeout=2.5)
    assert rs.idempotency().retention == 60 and rs.status().retention_ms == 60_000
    assert rs.chords().retention_ms == 60_000
    assert rs.idempotency().timeout == rs.status().timeout == rs.chords().timeout == 2.5


def test_a_companion_shares_its_stores_settings():
    status = status_store(RedisStore(URL, retention=60, timeout=2.5))
    chords = chord_store(status)
    assert isinstance(chords, RedisChords)
    assert chords.url == URL and chords.retention_ms == 60_000 and chords.timeout == 2.5
    pg = chord_store(status_store(PostgresStore(DSN, prefix="svc_", retention=60)))
    assert isinstance(pg, PostgresChords) and pg.db.dsn == DSN and pg.retention == 60


def test_each_backend_method_answers_the_same_store():
    backend = RedisBackend(URL)
    assert backend.idempotency() is backend.idempotency()
    assert backend.status() is backend.status() and backend.chords() is backend.chords()


def test_a_renamed_subclass_still_finds_its_companions():
    class Keys(PostgresStore):
        pass

    class Records(RedisStatus):
        pass

    status = status_store(Keys(DSN, prefix="svc_"))
    assert isinstance(status, PostgresStatus) and status.sql.table == "svc_status"
    chords = chord_store(Records(URL, key_prefix="a:status:"))
    assert isinstance(chords, RedisChords) and chords.key_prefix == "a:wf:"


def test_a_class_merely_named_like_a_store_is_not_one():
    impostor = type("PostgresStore", (), {})()
    with pytest.raises(ConfigurationError, match="status must be"):
        status_store(impostor)
    assert chord_store(type("RedisStatus", (), {})()) is None
    assert chord_store(object()) is None


def test_an_app_takes_its_stores_from_its_backend():
    backend = PostgresBackend(DSN, prefix="svc_")
    app = App(queue="q", backend=backend)
    assert app.idempotency is backend.idempotency()
    assert app.status_writer is not None and app.status_writer.store is backend.status()
    chords = chord_store(app.status_writer.store)
    assert isinstance(chords, PostgresChords) and chords.prefix == backend.chords().prefix

    @app.handler(Job)
    async def job(msg: Job) -> None: ...

    assert app.handlers[Job.type_name()].idempotency is backend.idempotency()


def test_an_explicit_store_wins_over_the_backends_for_its_kind():
    backend = RedisBackend(URL)
    keys = PostgresStore(DSN, prefix="own_")
    app = App(queue="q", backend=backend, idempotency=keys)
    assert app.idempotency is keys
    assert app.status_writer is not None and app.status_writer.store is backend.status()
    records = PostgresStatus(DSN, prefix="own_")
    app = App(queue="q", backend=backend, status=records)
    assert app.idempotency is backend.idempotency()
    assert app.status_writer is not None and app.status_writer.store is records


def test_an_app_without_a_backend_has_no_stores():
    app = App(queue="q")
    assert app.idempotency is None and app.status_writer is None


@pytest.mark.parametrize(
    ("make", "driver", "extra"),
    [(lambda: PostgresBackend(DSN), "psycopg", "postgres"), (RedisBackend, "redis", "redis")],
)
def test_a_backend_without_its_driver_says_which_extra_to_install(monkeypatch, make, driver, extra):
    monkeypatch.setitem(sys.modules, driver, None)
    with pytest.raises(ImportError, match=rf"pip install 'rabbitq\[{extra}\]'"):
        make()


def test_a_backend_checks_its_settings():
    with pytest.raises(ConfigurationError, match="table prefix"):
        PostgresBackend(DSN, prefix="Bad-Prefix")
    with pytest.raises(ConfigurationError, match="key_prefix"):
        RedisBackend(URL, key_prefix="")
    with pytest.raises(ConfigurationError, match="retention"):
        RedisBackend(URL, retention=0)
