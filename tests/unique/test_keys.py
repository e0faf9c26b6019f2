"""The key stores, PostgreSQL and Redis alike: one taker of a key among racers, leases and
windows that end, compare-and-delete releases, and a debounce key's latest, pending and
finished message."""

from __future__ import annotations

import asyncio

from rabbitq.unique.setup import key_store
from rabbitq.unique.store import RUN, SUPERSEDED, WAIT, KeyStore


def _keys(backend) -> KeyStore:
    store = key_store(backend.idempotency())
    assert store is not None
    return store


async def test_of_racing_takers_exactly_one_holds_the_key(backend):
    keys = _keys(backend)
    try:
        answers = await asyncio.gather(*(keys.take("k", f"m{i}", 60) for i in range(20)))
        winners = [f"m{i}" for i, a in enumerate(answers) if a is None]
        assert len(winners) == 1, answers
        assert set(answers) == {None, winners[0]}  # every other taker is told the holder
        assert await keys.take("k", winners[0], 60) == winners[0]  # again: refused too
    finally:
        await keys.close()


async def test_a_key_is_free_again_when_its_window_ends(backend):
    keys = _keys(backend)
    try:
        assert await keys.take("w", "m1", 0.3) is None
        assert await keys.take("w", "m2", 0.3) == "m1"
        await asyncio.sleep(0.6)
        assert await keys.take("w", "m2", 60) is None
    finally:
        await keys.close()


async def test_hold_extends_and_release_frees_only_for_the_holder(backend):
    keys = _keys(backend)
    try:
        assert await keys.take("h", "m1", 0.3) is None
        await keys.hold("h", "m1", 60)
        await keys.hold("h", "other", 0.001)  # not the holder: nothing changes
        await asyncio.sleep(0.6)
        assert await keys.take("h", "m2", 60) == "m1"
        await keys.release("h", "other")
        assert await keys.take("h", "m2", 60) == "m1"
        await keys.release("h", "m1")
        assert await keys.take("h", "m2", 60) is None
    finally:
        await keys.close()


async def test_a_debounce_key_runs_only_its_latest_once(backend):
    keys = _keys(backend)
    try:
        for mid in ("a", "b", "c"):
            await keys.propose("d", mid, 60)
            await keys.commit("d", mid)
        assert await keys.check("d", "a") == SUPERSEDED
        assert await keys.check("d", "c") == RUN
        await keys.finish("d", "c")
        assert await keys.check("d", "c") == SUPERSEDED  # delivered again: it ran
        assert await keys.check("d", "b") == SUPERSEDED
    finally:
        await keys.close()


async def test_the_latest_waits_while_a_newer_publish_is_on_its_way(backend):
    keys = _keys(backend)
    try:
        await keys.propose("e", "a", 60)
        await keys.commit("e", "a")
        await keys.propose("e", "b", 60)  # b's publish not yet confirmed
        assert await keys.check("e", "a") == WAIT
        await keys.commit("e", "b")
        assert await keys.check("e", "a") == SUPERSEDED
        assert await keys.check("e", "b") == RUN
        # a newer publish that fails gives the turn back
        await keys.propose("e", "c", 60)
        assert await keys.check("e", "b") == WAIT
        await keys.withdraw("e", "c")
        assert await keys.check("e", "b") == RUN
        # a publisher that died before its confirm: the wait ends with its lease
        await keys.propose("e", "ghost", 0.3)
        assert await keys.check("e", "b") == WAIT
        await asyncio.sleep(0.6)
        assert await keys.check("e", "b") == RUN
    finally:
        await keys.close()


async def test_a_delivered_message_whose_confirm_was_not_recorded_is_the_latest(backend):
    keys = _keys(backend)
    try:
        await keys.propose("f", "a", 60)  # sent, but its commit never reached the store
        assert await keys.check("f", "a") == RUN
        await keys.finish("f", "a")
        assert await keys.check("f", "a") == SUPERSEDED
    finally:
        await keys.close()


async def test_finishing_while_a_newer_one_is_pending_starts_its_burst(backend):
    keys = _keys(backend)
    try:
        await keys.propose("g", "a", 60)
        await keys.commit("g", "a")
        assert await keys.check("g", "a") == RUN
        await keys.propose("g", "b", 60)  # lands while a runs
        await keys.finish("g", "a")
        await keys.commit("g", "b")
        assert await keys.check("g", "b") == RUN
    finally:
        await keys.close()


async def test_a_debounce_record_lost_with_its_redis_runs_ended_ones_do_not():
    from rabbitq.effects.location import RedisLocation
    from rabbitq.unique.keys_redis import RedisKeys
    from tests.redis_node import RedisNode

    with RedisNode.started() as node:
        keys = RedisKeys(RedisLocation(url=node.url, base="k:"))
        try:
            published_in = await keys.propose("d", "a", 60)
            assert published_in and await keys.propose("d", "b", 60) == published_in
            await keys.commit("d", "a")
            await keys.commit("d", "b")
            assert await keys.check("d", "a", published_in) == SUPERSEDED
            assert await keys.check("d", "b", published_in) == RUN
            await keys.finish("d", "b")  # the burst ended, same epoch: not lost
            assert await keys.check("d", "b", published_in) == SUPERSEDED
            await keys.propose("e", "c", 60)
            await keys.commit("e", "c")
            await keys.close()
            node.restart()  # without persistence: the records and the epoch are gone
            assert await keys.check("e", "c", published_in) == RUN  # lost, not ended
            assert await keys.check("e", "older", published_in) == RUN  # a stale one too
            assert await keys.check("e", "c") == SUPERSEDED  # no epoch: as before
            assert keys.watch.changes == 1
        finally:
            await keys.close()
