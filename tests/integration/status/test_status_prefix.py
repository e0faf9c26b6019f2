"""Both status stores find the message ids that start with a prefix (``rabbitq cancel
6f1c0e2a``: docs/cli.md), taking the prefix literally (``%``, ``_``, ``*``, ``?`` and
``[`` are no wildcards), and at most ``limit`` of them."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest

from rabbitq.status import PostgresStatus, RedisStatus
from rabbitq.status.lookup import ids_starting_with
from rabbitq.status.model import Record
from tests.helpers import REDIS_URL

PG_URL = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
IDS = ["ab12-one", "ab12-two", "ab34", "a%b", "a_b", "a*c", "a?c", "a[c]", "zz"]


@pytest.fixture(params=["redis", "postgres"])
async def store(request, redis_prefix) -> AsyncIterator[PostgresStatus | RedisStatus]:
    made: PostgresStatus | RedisStatus
    if request.param == "postgres":
        made = PostgresStatus(PG_URL, prefix=f"t_{uuid.uuid4().hex[:8]}_", cleanup_interval=None)
    else:
        made = RedisStatus(REDIS_URL, key_prefix=redis_prefix + "status:")
    await made.write([Record(mid, "published", 1000.0) for mid in IDS])
    yield made
    await made.drop()
    await made.close()


async def test_the_ids_that_start_with_a_prefix_taken_literally(store):
    assert await ids_starting_with(store, "ab12", limit=6) == ["ab12-one", "ab12-two"]
    assert await ids_starting_with(store, "ab", limit=6) == ["ab12-one", "ab12-two", "ab34"]
    for literal in ("a%", "a_", "a*", "a?", "a["):
        found = await ids_starting_with(store, literal, limit=6)
        assert found == [m for m in IDS if m.startswith(literal)], literal
    assert await ids_starting_with(store, "nothing", limit=6) == []
    assert len(await ids_starting_with(store, "a", limit=2) or []) == 2
    assert await ids_starting_with(store, "", limit=6) is None  # no prefix: no search
