"""An app for tests/cli/test_publish_options.py (``rabbitq publish`` loads it by
``MODULE:APP``): three priority lanes and unique publishes over the real Redis; its
queue, exchange and key prefix from ``$T_PUBLISH_QUEUE`` and ``$T_PUBLISH_PREFIX``."""

from __future__ import annotations

import os

from rabbitq import App, Context, Message
from rabbitq.backends import RedisBackend

QUEUE = os.environ.get("T_PUBLISH_QUEUE", "t.publish.options")
PREFIX = os.environ.get("T_PUBLISH_PREFIX", "rabbitq-test-publish:")
REDIS = os.environ.get("RABBITQ_TEST_REDIS", "redis://127.0.0.1:6379/0")


class Report(Message, type="t.publish.report"):
    name: str


app = App(
    queue=QUEUE,
    exchange=QUEUE,
    priorities=3,
    backend=RedisBackend(REDIS, key_prefix=PREFIX),
)


@app.handler(Report)
async def build(message: Report, ctx: Context) -> None:
    """Never run here: the test only publishes."""
