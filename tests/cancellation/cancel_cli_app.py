"""Apps for tests/cancellation/test_cancel_cli.py (``rabbitq cancel`` loads them by
``MODULE:APP``): one over the real Redis (its key prefix from
``$RABBITQ_TEST_CANCEL_PREFIX``), one over a Redis nobody listens on, one not
cancellable."""

from __future__ import annotations

import os

from rabbitq import App
from rabbitq.backends import RedisBackend

PREFIX = os.environ.get("RABBITQ_TEST_CANCEL_PREFIX", "rabbitq-test-cancel:")
REDIS = os.environ.get("RABBITQ_TEST_REDIS", "redis://127.0.0.1:6379/0")

app = App(queue="t.cancel.cli", backend=RedisBackend(REDIS, key_prefix=PREFIX), cancellable=True)
down = App(
    queue="t.cancel.cli.down",
    backend=RedisBackend("redis://127.0.0.1:1/0", key_prefix=PREFIX, timeout=1.0),
    cancellable=True,
)
plain = App(queue="t.cancel.cli.plain")
