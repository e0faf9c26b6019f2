"""A store that lost its data (rabbitq.effects.epoch): the epoch's form, the watch that
warns once per change, whether a Redis's settings keep its data (pure); then on a
private Redis (tests/redis_node.py): the epoch outlives a restart with an AOF, not
without, and the settings read back as written."""

from __future__ import annotations

import logging

import pytest
import redis.asyncio as aioredis

from rabbitq.effects import epoch
from tests.redis_node import RedisNode


def test_an_epoch_says_when_it_was_written():
    made = epoch.new_epoch(now=86_400.5)
    assert made.endswith("@86400.500") and made != epoch.new_epoch(now=86_400.5)
    assert epoch.epoch_time(made) == 86_400.5
    assert epoch.when(made) == "1970-01-02 00:00:00 UTC"
    assert epoch.epoch_time("no time") is None and epoch.when(None) == "an unknown time"


def test_the_watch_warns_once_per_change(caplog):
    watch = epoch.EpochWatch("RedisCancels('redis://r')", "cancellations")
    with caplog.at_level(logging.WARNING, logger="rabbitq.worker"):
        assert watch.saw("a@1") is False  # the first one: nothing to compare with
        assert watch.saw("a@1") is False and watch.saw(None) is False
        assert watch.saw("b@86400") is True
        assert watch.saw("a@1") is False  # an old one read off a message: seen before
        assert watch.saw("b@86400") is False
    (line,) = [r.getMessage() for r in caplog.records]
    assert "RedisCancels('redis://r') lost its data" in line
    assert "cancellations recorded before 1970-01-02 00:00:00 UTC may be lost" in line
    assert watch.changes == 1


@pytest.mark.parametrize(
    ("appendonly", "save", "problem", "durable"),
    [
        ("no", "", True, False),
        ("no", " ", True, False),
        ("yes", "", False, True),
        ("no", "3600 1 300 100", False, False),  # RDB only: the last writes are lost
        ("yes", "3600 1", False, True),
        (None, None, False, None),  # CONFIG refused: not known
    ],
)
def test_which_settings_keep_the_data(appendonly, save, problem, durable):
    assert (epoch.persistence_problem(appendonly, save) is not None) is problem
    assert epoch.durable(appendonly, save) is durable


@pytest.mark.parametrize("persist", [False, True])
async def test_the_epoch_lasts_as_long_as_the_data(persist):
    with RedisNode.started(persist=persist) as node:
        client = aioredis.Redis.from_url(node.url)
        try:
            first = await epoch.current(client, "x:store-epoch")
            assert await epoch.current(client, "x:store-epoch") == first
            aof, save = await epoch.persistence(client)
            assert (aof, save) == ("yes" if persist else "no", "")
            await client.aclose()
            node.restart()
            client = aioredis.Redis.from_url(node.url)
            again = await epoch.current(client, "x:store-epoch")
        finally:
            await client.aclose()
    assert (again == first) is persist
