"""Real network partitions: a 3-node cluster whose nodes sit in network namespaces of
their own (tests/netns_cluster.py, ``pause_minority``), cut with iptables inside the
namespaces, under three workers, a publisher given all three addresses, a PostgreSQL
idempotency store and a 1 s schedule whose leader is on the cut side
(tests/chaos/netns_scenarios.py).

Every confirmed message must end handled or in the DLQ (what the broker holds is waited
for, and where each late one was found is printed), every key's effect must be written
exactly once, and no tick of the schedule may be missed or doubled.

By default one scenario (a node cut from its peers for 30 s, 600 messages: about 2
minutes with forming the cluster; the nodes' dead-letter timer is 10 s, and
``RABBITQ_CHAOS_WAIT_HOLD=1`` leaves it at RabbitMQ's 180 s). ``RABBITQ_CHAOS_FULL=1``
runs all four (10 s and 30 s cuts, a partial partition, a node cut from peers and
clients: 2,400 messages, 6 to 13 minutes with the 180 s timer).
It needs root, ``ip netns`` and iptables; without them it skips, saying which is missing.
Figures and open findings: docs/reliability.md ("Network partitions").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from rabbitq.schedule import fence, tick

from ..netns_cluster import NetnsCluster, leftovers, unavailable
from . import netns_scenarios
from .netns_scenarios import SCENARIOS

FULL = os.environ.get("RABBITQ_CHAOS_FULL") == "1"
SELECTED = SCENARIOS if FULL else (SCENARIOS[1],)
WAIT_HOLD = os.environ.get("RABBITQ_CHAOS_WAIT_HOLD") == "1"
"""Leave the nodes' dead-letter timer at RabbitMQ's 180 s. By default it is 10 s
(``dead_letter_worker_publisher_confirm_timeout``, the operator's remedy in
docs/reliability.md), so that retries held by the broker through a cut arrive within
the suite's time; they are counted as held either way."""

pytestmark = pytest.mark.slow

DOUBT_WINDOW = fence.LEASE_PERIOD + tick.COMMIT_TIMEOUT
"""A tick whose commit was in doubt when the cut began may go out twice (once from each
side, under one ``message_id``) within this many seconds of the cut; none later."""


@pytest.fixture(scope="module")
def netns_cluster() -> Iterator[NetnsCluster]:
    reason = unavailable()
    if reason:
        pytest.skip(f"network partition chaos test skipped: {reason}")
    with NetnsCluster.started(dead_letter_timeout=None if WAIT_HOLD else 10_000) as cluster:
        yield cluster
    names = [node.ns for node in cluster.nodes]
    assert not set(names) & set(leftovers()), f"namespaces left behind: {names}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("scenario", SELECTED, ids=lambda s: f"{s.kind}-{s.seconds:.0f}s")
async def test_a_partition_loses_no_confirmed_message_and_misses_no_tick(
    netns_cluster, tmp_path, scenario
):
    report = await netns_scenarios.run(
        netns_cluster,
        tmp_path,
        scenario,
        messages=600,
        hold_limit=420.0,
    )
    print("\n" + report.line())
    for note in report.notes:
        print("  " + note)
    for mid, place in sorted(report.where.items()):
        print(f"  {mid}: {place}")
    assert len(report.confirmed) >= 590, report.line()  # publishes waited out the cut
    assert not report.lost, (sorted(report.lost)[:10], report.line())
    assert not report.pending, (report.pending, report.line())
    assert not report.effects_wrong, (report.effects_wrong[:10], report.line())
    refused = {m for m in report.confirmed if not report.expected_effect(m)}
    assert refused <= set(report.dead), report.line()  # each refused one in the DLQ
    assert not report.doubled_ticks, (report.doubled_ticks, report.line())
    if report.missing_ticks and missed_only_during_the_cut(report):
        # Known and open (issue 40; docs/reliability.md, "A tick was missed"): a tick and
        # its progress record are one transaction over queues whose leaders may sit on
        # the two sides of the cut, which RabbitMQ does not make atomic. Reported as an
        # expected failure, not hidden: a tick missed outside the cut still fails.
        pytest.xfail(f"known: {len(report.missing_ticks)} tick(s) missed during the cut "
                     f"(docs/reliability.md, 'A tick was missed'): {report.line()}")  # fmt: skip
    assert not report.missing_ticks, (report.missing_ticks, report.line())


def missed_only_during_the_cut(report: netns_scenarios.Report) -> bool:
    """Whether every missed tick came due between the cut and the heal (pure)."""
    if report.cut_wall is None or report.healed_wall is None:
        return False
    due = [datetime.fromisoformat(t) for t in report.missing_ticks]
    return all(report.cut_wall <= t <= report.healed_wall for t in due)


@pytest.mark.timeout(900)
async def test_a_partial_partition_of_the_leaders_node_leaves_one_leader(netns_cluster, tmp_path):
    """A 40 s partial partition of the leader's node (issue 40): its node and one other
    lose each other, the third sees both; each side's Mnesia keeps its own exclusive
    lease. Counted after the work settled (the cluster whole again, the workers
    stopped): no tick missed, and none published twice, except one whose commit was in
    doubt within a lease period of the cut (docs/schedules.md, "Through a network
    partition"); none after the heal."""
    report = await netns_scenarios.run(
        netns_cluster, tmp_path, netns_scenarios.LEADER_PARTIAL, messages=200, hold_limit=420.0
    )
    print("\n" + report.line())
    for note in report.notes:
        print("  " + note)
    assert report.cut_wall is not None and report.healed_wall is not None
    doubled = {t: report.tick_times[t].isoformat() for t in report.doubled_ticks}
    print(f"  ticks published twice: {len(doubled)} of {len(report.ticks)}: "
          f"{sorted(doubled.values())}")
    in_doubt = report.cut_wall + timedelta(seconds=DOUBT_WINDOW)
    assert not report.missing_ticks, (report.missing_ticks, report.line())
    assert not report.doubled_after(report.healed_wall), (doubled, report.line())
    assert not report.doubled_after(in_doubt), (doubled, report.line())
