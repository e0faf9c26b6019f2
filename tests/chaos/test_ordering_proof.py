"""The ordering proof at a small size (the full one: ``python -m tests.chaos.ordering_proof``),
on a broker with the consistent-hash exchange plugin (``hash_broker_url``: the broker under
test if it has it, else a private node)."""

from __future__ import annotations

import signal

import pytest

from .ordering_proof import count, run


def test_the_count_tells_a_violation_from_a_duplicate():
    lines = ["1 a 1 1", "1 a 2 1", "2 a 2 1", "2 a 4 1", "2 a 3 1", "1 b 1 2"]
    handled, handlings, violations = count(lines)
    assert (len(handled), handlings, violations) == (5, 6, 1)


# The run's own 120 s limit reports what was left; the test's limit must not cut it short.
@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_ordered_partitions_keep_each_key_in_order_through_two_kills(hash_broker_url):
    figures = await run(keys=10, per_key=40, kills=2, url=hash_broker_url, timeout=120)

    assert figures.published == 400
    assert len(figures.kills) == 2, figures.lines()
    assert figures.violations == 0, figures.lines()
    assert figures.lost == 0 and figures.pending == 0, figures.lines()
    assert figures.handled == 400 and figures.dead == 0, figures.lines()


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_a_worker_stopped_with_sigterm_gives_its_partitions_back_in_order(hash_broker_url):
    figures = await run(
        keys=8, per_key=30, kills=1, url=hash_broker_url, timeout=120, stop=signal.SIGTERM
    )

    assert len(figures.kills) == 1, figures.lines()
    assert figures.violations == 0, figures.lines()
    assert figures.lost == 0 and figures.pending == 0 and figures.handled == 240, figures.lines()
