"""Chaos under load against a private broker: every published message ends handled or
in the DLQ, with duplicates counted (see ``scenarios.py``; ``scripts/reliability.py``
runs the same scenarios with bigger counts for ``docs/reliability.md``)."""

from __future__ import annotations

import math

import pytest

from . import scenarios

pytestmark = pytest.mark.slow


async def test_workers_killed_with_sigkill_under_load_lose_nothing(chaos_node, tmp_path):
    result = await scenarios.kill_workers(chaos_node.url, tmp_path, messages=1200, kills=3)
    result.tally.assert_nothing_lost()
    assert result.recover_s, "no worker was killed under load"
    assert result.tally.dlq_reasons.keys() <= {"permanent", "exhausted"}


async def test_connections_cut_mid_handling_lose_nothing(chaos_node, tmp_path):
    result = await scenarios.cut_connections(chaos_node.url, tmp_path, messages=600, cuts=2)
    result.tally.assert_nothing_lost()
    assert result.recover_s and not any(math.isnan(s) for s in result.recover_s)


async def test_retry_copies_lost_in_a_stalled_then_cut_connection_are_retried_again(
    chaos_node, tmp_path
):
    result = await scenarios.cut_during_retry_copies(chaos_node.url, tmp_path, messages=40)
    result.tally.assert_nothing_lost()
    # none of the copies reached the broker, so every original came back and was retried
    assert "retry copies stored before the cut: 0" in result.notes
    assert result.tally.handled.total() == 40 and not result.tally.dead


async def test_a_half_open_connection_is_found_by_the_heartbeat_and_replaced(chaos_node, tmp_path):
    result = await scenarios.stall_connection(chaos_node.url, tmp_path, messages=400, heartbeat=1)
    result.tally.assert_nothing_lost()
    assert not math.isnan(result.recover_s[0])


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
async def test_a_broker_restart_under_load_loses_nothing_and_readyz_follows_it(
    chaos_node, tmp_path, queue_type
):
    result = await scenarios.restart_broker(
        chaos_node, tmp_path, messages=800, down_for=2.0, queue_type=queue_type
    )
    result.tally.assert_nothing_lost()
    assert not result.tally.unconfirmed  # the publisher waited through the outage
    readiness = result.notes[0]
    assert "'503'" in readiness and "'200'" not in readiness.split(";")[0], readiness
    assert not math.isnan(result.recover_s[0])


async def test_sigterm_while_retries_and_dead_letters_are_written_loses_nothing(
    chaos_node, tmp_path
):
    result = await scenarios.sigterm_workers(chaos_node.url, tmp_path, messages=800, terms=3)
    result.tally.assert_nothing_lost()
    assert result.recover_s, "no SIGTERM under load"
    assert result.notes == [f"exit statuses: {[0] * len(result.recover_s)}"]
