"""A message whose handler kills the worker process every time.

On a quorum queue the broker counts the deliveries and dead-letters it after
``x-delivery-limit`` (the DLQ tools show ``broker:delivery_limit``); on a classic queue
(RabbitMQ 3.10) nothing counts them, and the loop goes on for as long as the worker is
restarted. See docs/reliability.md.
"""

from __future__ import annotations

import pytest

from . import scenarios

pytestmark = pytest.mark.slow


async def test_on_a_quorum_queue_a_crash_looping_message_ends_in_the_dlq_at_the_limit(
    chaos_node, tmp_path
):
    result = await scenarios.crash_loop(
        chaos_node.url, tmp_path, queue_type="quorum", delivery_limit=3, others=20
    )
    result.tally.assert_nothing_lost()
    assert result.faults.startswith("4 x os._exit(1)")  # delivered 1 + limit times
    assert result.notes[0] == "poison message: DLQ, broker:delivery_limit"
    assert set(result.tally.dlq_reasons) == {"broker:delivery_limit"}


async def test_on_a_classic_queue_nothing_stops_a_crash_loop(chaos_node, tmp_path):
    result = await scenarios.crash_loop(
        chaos_node.url, tmp_path, queue_type="classic", max_crashes=5, others=5
    )
    assert result.faults.startswith("5 x os._exit(1)")
    assert result.notes[0] == "poison message: still in the queue"
    assert not result.tally.lost and not result.tally.dead  # not lost: stuck
