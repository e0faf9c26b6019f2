"""Claims kept alive by a heartbeat (issue #33, item 3): a live holder's claim is renewed,
a dead one's lapses within the TTL, and a handler whose claim may lapse is stopped
before it does (the once-only proof never rests on the heartbeat reaching the store)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from rabbitq.effects import StoreUnavailable
from rabbitq.effects import heartbeat as hb
from rabbitq.effects.guard import Effects, run_once
from rabbitq.effects.heartbeat import Heartbeat, held, renewal_ttl, time_left
from rabbitq.effects.store import BUSY, NEW, Claim, LeaseLost, lease_for


def test_a_claim_is_renewed_for_the_ttl_but_never_past_its_lease() -> None:
    assert hb.first_ttl(305, 15) == 15 and hb.first_ttl(7, 15) == 7
    # A handler without a timeout: no bound, renewed for as long as it runs.
    assert lease_for(None) == math.inf and hb.first_ttl(lease_for(None), 15) == 15
    assert renewal_ttl(now=1e6, hold_until=lease_for(None), ttl=15) == 15
    assert renewal_ttl(now=100, hold_until=400, ttl=15) == 15
    assert renewal_ttl(now=100, hold_until=104, ttl=15) == 4
    assert renewal_ttl(now=100, hold_until=99, ttl=15) <= 0  # over: not renewed


def test_a_handler_must_stop_a_margin_before_its_first_claim_may_lapse() -> None:
    a, b = Claim("a", NEW, valid_until=110.0), Claim("b", NEW, valid_until=120.0)
    assert time_left([a, b], now=100.0, margin=2.0) == 8.0
    assert time_left([a], now=109.0, margin=2.0) == 0.0
    b.lost = True
    assert time_left([a, b], now=100.0, margin=2.0) == 0.0


class FakeRenew:
    """The store's renewal: the tokens it keeps, or a fault."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, float]]] = []
        self.fail = False
        self.taken: set[str] = set()  # tokens whose key another worker took

    async def __call__(self, batch: Any) -> set[str]:
        self.calls.append([(c.key, ttl) for c, ttl in batch])
        if self.fail:
            raise StoreUnavailable("store paused")
        return {c.token for c, _ in batch if c.token not in self.taken}


async def test_one_beat_renews_every_claim_held_in_one_call_and_marks_a_lost_one() -> None:
    renew = FakeRenew()
    beat = Heartbeat(renew, "store", every=60, ttl=15)
    claims = [Claim(f"k{i}", NEW) for i in range(3)]
    for c in claims:
        beat.hold(c, sent=0.0, lease=305)
        assert c.valid_until == 15.0
    renew.taken.add(claims[2].token)
    await beat.beat(5.0)
    assert renew.calls == [[("k0", 15), ("k1", 15), ("k2", 15)]]  # one call for all
    assert claims[0].valid_until == claims[1].valid_until == 20.0
    assert claims[2].lost and claims[2].valid_until == 15.0
    renew.fail = True  # the store paused: nothing is extended, nothing is lost
    await beat.beat(10.0)
    assert claims[0].valid_until == 20.0 and not claims[0].lost
    renew.fail = False
    beat.drop(claims[1])  # settled: no longer renewed
    await beat.beat(15.0)
    assert renew.calls[-1] == [("k0", 15)]
    await beat.beat(304.0)  # within a second of its lease's end: renewed up to it only
    assert renew.calls[-1] == [("k0", 1.0)]
    await beat.beat(306.0)  # past it: dropped, it lapses by itself
    assert len(renew.calls) == 4
    await beat.close()


async def test_the_heartbeat_runs_only_while_claims_are_held() -> None:
    renew = FakeRenew()
    beat = Heartbeat(renew, "store", every=0.05, ttl=1.0)
    claim = Claim("k", NEW)
    beat.hold(claim, sent=asyncio.get_running_loop().time(), lease=60)
    await asyncio.sleep(0.3)
    assert len(renew.calls) >= 2  # beating
    beat.drop(claim)
    await asyncio.sleep(0.15)
    calls = len(renew.calls)
    await asyncio.sleep(0.2)
    assert len(renew.calls) == calls  # stopped by itself
    await beat.close()


async def test_held_stops_the_block_before_its_claim_may_lapse() -> None:
    loop = asyncio.get_running_loop()
    claim = Claim("k", NEW, valid_until=loop.time() + hb.LAPSE_MARGIN + 0.2)
    reached = []
    with pytest.raises(LeaseLost):
        async with held([claim]):
            await asyncio.sleep(30)
            reached.append(1)
    assert not reached
    assert loop.time() < claim.valid_until  # stopped before the claim could lapse


async def test_held_stops_the_block_when_a_renewal_finds_the_claim_lost() -> None:
    claim = Claim("k", NEW, valid_until=asyncio.get_running_loop().time() + 60)

    async def lose() -> None:
        await asyncio.sleep(0.1)
        claim.lost = True

    task = asyncio.create_task(lose())
    with pytest.raises(LeaseLost):
        async with held([claim]):
            await asyncio.sleep(30)
    await task


async def test_held_lets_a_block_with_a_live_claim_finish_and_ignores_claims_without_heartbeat(
) -> None:  # fmt: skip
    claim = Claim("k", NEW, valid_until=asyncio.get_running_loop().time() + 60)
    async with held([claim]):
        await asyncio.sleep(0.05)
    plain = Claim("k", NEW)
    assert math.isinf(plain.valid_until)
    async with held([plain]):
        await asyncio.sleep(0.05)
    # An outer cancellation is not mistaken for a lapse.
    task = asyncio.create_task(_sleep_held(claim))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _sleep_held(claim: Claim) -> None:
    async with held([claim]):
        await asyncio.sleep(30)


class PausedStore:
    """A store whose heartbeat cannot reach it (a paused database): claims succeed, every
    renewal fails."""

    transactional = False

    def __init__(self) -> None:
        self.renew = FakeRenew()
        self.renew.fail = True
        self.heartbeat = Heartbeat(self.renew, "paused", every=0.1, ttl=hb.LAPSE_MARGIN + 0.5)
        self.released: list[str] = []
        self.marked: list[str] = []

    async def claim(self, key: str, *, lease: float) -> Claim:
        claim = Claim(key, NEW)
        self.heartbeat.hold(claim, sent=asyncio.get_running_loop().time(), lease=lease)
        return claim

    async def done(self, claim: Claim) -> bool:
        self.marked.append(claim.key)
        return True

    async def release(self, claim: Claim) -> None:
        self.heartbeat.drop(claim)
        self.released.append(claim.key)


async def test_a_slow_handler_whose_claim_cannot_be_renewed_is_stopped_and_its_key_released(
) -> None:  # fmt: skip
    store = PausedStore()
    fx = Effects(message_id="m", correlation_id=None, key="k", store=store)  # type: ignore[arg-type]
    effects: list[str] = []

    async def slow() -> None:
        await asyncio.sleep(30)
        effects.append("paid")  # never: the claim may have lapsed by then

    async def send(_: Any) -> None:
        raise AssertionError("no follow-ups")

    with pytest.raises(LeaseLost):
        await run_once(fx, slow, send, lease=305)
    assert effects == [] and store.marked == [] and store.released == ["k"]
    assert len(store.renew.calls) >= 2  # it kept trying
    await store.heartbeat.close()


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """A heartbeat 50 times quicker, for the stores made after it."""
    monkeypatch.setattr(hb, "HEARTBEAT", 0.1)
    monkeypatch.setattr(hb, "CLAIM_TTL", 0.3)


async def test_a_live_holders_claim_outlives_its_ttl_and_a_closed_ones_lapses_within_it(
    quick: None, make_store: Any
) -> None:
    a, b = make_store(), make_store()
    claim = await a.claim("k", lease=300)
    assert claim.status is NEW
    await asyncio.sleep(1.0)  # three TTLs: only the heartbeat keeps it
    assert (await b.claim("k", lease=300)).status is BUSY
    loop = asyncio.get_running_loop()
    await a.close()  # its heartbeat stops (as a killed worker's), the claim is not released
    stopped = loop.time()
    while (await b.claim("k", lease=300)).status is not NEW:
        assert loop.time() - stopped < 10, "the dead holder's claim never lapsed"
        await asyncio.sleep(0.05)
    # Old claims lasted their whole lease (300 s here); now the TTL and a beat at most.
    assert loop.time() - stopped < 5
