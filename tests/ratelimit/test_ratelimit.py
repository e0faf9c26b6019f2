"""Rates, the GCRA reservation, the local limiter, the concurrency cap and the gate."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from rabbitq.errors import ConfigurationError
from rabbitq.ratelimit import LocalRates
from rabbitq.ratelimit.gate import Gate
from rabbitq.ratelimit.local import ConcurrencyCap
from rabbitq.ratelimit.rate import Rate, check, parse_rate


@pytest.mark.parametrize(
    ("text", "count", "period"),
    [
        ("14/s", 14, 1.0),
        ("100/m", 100, 60.0),
        ("5000/h", 5000, 3600.0),
        ("3/10s", 3, 10.0),
        ("20/500ms", 20, 0.5),
        (" 7 / d ", 7, 86400.0),
        ("1/1.5s", 1, 1.5),
    ],
)
def test_parse_rate_reads_count_per_unit(text: str, count: int, period: float) -> None:
    rate = parse_rate(text)
    assert (rate.count, rate.period, rate.burst) == (count, period, 1)


@pytest.mark.parametrize("text", ["", "14", "14/", "/s", "0/s", "-1/s", "14/y", "1.5/s", "x/s"])
def test_parse_rate_refuses_what_it_cannot_read(text: str) -> None:
    with pytest.raises(ConfigurationError):
        parse_rate(text)


def test_parse_rate_refuses_a_non_string() -> None:
    with pytest.raises(ConfigurationError):
        parse_rate(14)  # type: ignore[arg-type]


def test_a_burst_above_the_count_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        parse_rate("3/s", burst=4)


def test_a_rate_prints_as_it_was_written() -> None:
    assert [str(parse_rate(t)) for t in ("14/s", "100/m", "3/10s")] == ["14/s", "100/m", "3/10s"]


def _starts(rate: Rate, n: int, lateness: list[float] | None = None) -> list[float]:
    """When ``n`` callers that all arrive at 0 start, each asking again when told to,
    and waking ``lateness[i]`` seconds later than asked (a busy event loop)."""
    tat = None
    now = 0.0
    starts = []
    for i in range(n):
        while not (decision := check(tat, now, rate)).allowed:
            now += decision.wait + (lateness[i] if lateness else 0.0)
        tat = decision.tat
        starts.append(now)
    return starts


def test_callers_arriving_together_are_spaced_one_interval_apart() -> None:
    starts = _starts(parse_rate("20/s"), 200)
    gaps = {round(b - a, 9) for a, b in zip(starts, starts[1:], strict=False)}
    assert gaps == {0.05}
    assert starts[0] == 0.0 and starts[-1] == pytest.approx(9.95)


def test_no_second_holds_more_than_the_count() -> None:
    starts = _starts(parse_rate("20/s"), 200)
    per_second = Counter(int(s + 1e-9) for s in starts)
    assert max(per_second.values()) == 20
    # and no sliding one-second window either
    assert max(sum(1 for s in starts if t <= s < t + 1 - 1e-9) for t in starts) == 20


def test_a_caller_that_wakes_late_pushes_the_next_start_later_instead_of_bunching() -> None:
    lateness = [0.0, 0.03, 0.0, 0.04, 0.0, 0.0]
    starts = _starts(parse_rate("20/s"), 6, lateness)
    gaps = [round(b - a, 9) for a, b in zip(starts, starts[1:], strict=False)]
    assert gaps == [0.08, 0.05, 0.09, 0.05, 0.05]  # never under one interval


def test_a_denied_call_changes_nothing() -> None:
    rate = parse_rate("10/s")
    granted = check(None, 0.0, rate)
    assert granted.allowed and granted.tat == pytest.approx(0.1)
    denied = check(granted.tat, 0.04, rate)
    assert not denied.allowed and denied.wait == pytest.approx(0.06)
    assert denied.tat == granted.tat


def test_a_burst_starts_at_once_after_a_quiet_spell_then_paces() -> None:
    rate = parse_rate("10/s", burst=5)
    starts = _starts(rate, 8)
    assert starts[:5] == [0.0] * 5
    assert starts[5:] == pytest.approx([0.1, 0.2, 0.3])


def test_a_key_used_long_ago_does_not_bank_slots() -> None:
    rate = parse_rate("10/s")
    first = check(None, 0.0, rate)
    later = check(first.tat, 100.0, rate)
    assert later.allowed and later.tat == pytest.approx(100.1)
    assert check(later.tat, 100.0, rate).wait == pytest.approx(0.1)


async def test_local_rates_keep_one_budget_per_key() -> None:
    now = [0.0]
    rates = LocalRates(clock=lambda: now[0])
    rate = parse_rate("2/s")
    assert await rates.acquire("a", rate) == 0.0
    assert await rates.acquire("a", rate) == 0.5  # denied: ask again in 0.5 s
    assert await rates.acquire("b", rate) == 0.0
    now[0] = 0.5
    assert await rates.acquire("a", rate) == 0.0
    now[0] = 10.0
    assert await rates.acquire("a", rate) == 0.0
    await rates.close()


async def test_the_concurrency_cap_is_never_exceeded() -> None:
    cap = ConcurrencyCap(3)
    running = peak = 0

    async def job() -> None:
        nonlocal running, peak
        await cap.acquire()
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.001)
        running -= 1
        cap.release()

    await asyncio.gather(*(job() for _ in range(50)))
    assert peak == 3 and cap.in_use == 0


@pytest.mark.parametrize("limit", [0, -1, True, 1.5])
def test_a_concurrency_that_is_not_a_positive_integer_is_refused(limit: object) -> None:
    with pytest.raises(ConfigurationError):
        ConcurrencyCap(limit)  # type: ignore[arg-type]


class _Clockless:
    """A backend that records reservations and never makes anyone wait."""

    def __init__(self) -> None:
        self.reserved: list[str] = []

    async def acquire(self, key: str, rate: Rate) -> float:
        self.reserved.append(key)
        return 0.0

    async def close(self) -> None:
        pass


async def test_the_gate_takes_a_place_before_a_rate_slot() -> None:
    backend = _Clockless()
    gate = Gate("q:t", rate=parse_rate("1000/s"), backend=backend, concurrency=1)
    await gate.enter()
    second = asyncio.create_task(gate.enter())
    await asyncio.sleep(0.01)
    assert backend.reserved == ["q:t"] and gate.waiting == 1 and gate.running == 1
    gate.leave()
    await second
    assert backend.reserved == ["q:t", "q:t"] and gate.running == 1
    gate.leave()
    assert gate.running == 0 and gate.cap is not None and gate.cap.in_use == 0


async def test_a_waiter_cancelled_in_the_gate_gives_its_place_back() -> None:
    gate = Gate("k", rate=parse_rate("1/10s"), backend=LocalRates(), concurrency=1)
    assert await gate.enter() < 0.05  # the first slot is free
    gate.leave()
    waiter = asyncio.create_task(gate.enter())  # must wait ~10 s for the next slot
    await asyncio.sleep(0.01)
    assert gate.waiting == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert gate.waiting == 0 and gate.running == 0
    assert gate.cap is not None and gate.cap.in_use == 0


async def test_the_gate_reports_how_long_it_waited() -> None:
    gate = Gate("k", rate=parse_rate("4/s"), backend=LocalRates(), concurrency=None)
    waits = [await gate.enter() for _ in range(3)]
    for _ in waits:
        gate.leave()
    # sequential callers: each one waits for the slot one interval (0.25 s) after the
    # previous, less the moment between two calls (0.1 s of slack for a busy machine)
    assert waits[0] < 0.1 and min(waits[1:]) >= 0.15
