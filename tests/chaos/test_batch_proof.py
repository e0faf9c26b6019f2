"""The batch proof at a reduced size (the full 10,000: ``python -m
tests.chaos.batch_proof``): batches with partial failures, a worker killed with
``kill -9`` mid-run; every message handled or dead-lettered exactly once by count.
Worker processes of its own on the shared broker; figures printed (``-s``)."""

from __future__ import annotations

import pytest

from . import batch_service as service
from .batch_proof import prove

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MESSAGES = 1000


async def test_batches_with_partial_failures_and_a_kill_9_handle_every_message_once(
    broker_url, tmp_path
):
    count = await prove(broker_url, MESSAGES, kills=1, workdir=tmp_path)
    print("\n" + count.lines())
    assert count.kills == 1
    assert count.lost == 0 and count.left == 0
    assert count.both == 0
    assert count.handled + count.dead == MESSAGES
    # the batch's own dead letters (1 in 50), unless a message ran out of attempts first
    # in batches that failed as a whole; and those that failed every attempt
    assert set(count.reasons) <= {"permanent", "exhausted"}
    assert count.reasons["permanent"] >= 0.8 * MESSAGES // 50
    # a kill repeats at most the effects of the batches the killed worker was running
    assert count.repeated <= count.kills * service.PREFETCH
    assert count.dead_twice <= count.kills * service.PREFETCH  # same message_id, copies
    # under load (all published at once) most deliveries go in full batches
    assert max(count.sizes) == service.MAX_SIZE and count.triggers["full"] >= 5
