"""One private RabbitMQ node for every chaos test: they restart it, cut connections to
it and kill workers, which must never happen to the shared broker. It needs this
machine's RabbitMQ installation (``rabbitmq-server`` on the PATH): without one the
chaos tests fail in CI (``CI`` set) and skip elsewhere."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from ..broker_node import BrokerNode

# test_once.py, test_group_commit_kills.py and test_outbox_relay_kill.py use the effects
# tests' PostgreSQL fixtures (and the outbox's: an App bound to a sink queue).
from ..effects.conftest import bound, make_outbox, pg, pg_url, prefix  # noqa: F401


@pytest.fixture(scope="session")
def chaos_node() -> Iterator[BrokerNode]:
    if shutil.which("rabbitmq-server") is None:
        reason = "the chaos tests start a private RabbitMQ node: install rabbitmq-server"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with BrokerNode.started("rabbitq-chaos") as node:
        yield node
