"""One private RabbitMQ node for every chaos test: they restart it, cut connections to
it and kill workers, which must never happen to the shared broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..broker_node import BrokerNode


@pytest.fixture(scope="session")
def chaos_node() -> Iterator[BrokerNode]:
    with BrokerNode.started("rabbitq-chaos") as node:
        yield node
