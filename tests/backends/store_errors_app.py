"""Apps for tests/backends/test_store_errors.py (the CLI loads them by ``MODULE:APP``):
over a PostgreSQL database that does not exist, and over a Redis port nobody listens on."""

from __future__ import annotations

import os

from rabbitq import App
from rabbitq.backends import PostgresBackend, RedisBackend

PG = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
MISSING_DB = PG.rsplit("/", 1)[0] + "/rabbitq_no_such_db"
NO_REDIS = "redis://127.0.0.1:1/0"

missing_db = App(
    queue="t.store-errors.pg",
    backend=PostgresBackend(MISSING_DB, timeout=1.0, cleanup_interval=None),
    cancellable=True,
)
wrong_port = App(
    queue="t.store-errors.redis",
    backend=RedisBackend(NO_REDIS, timeout=1.0),
    cancellable=True,
)
