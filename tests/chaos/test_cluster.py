"""The cluster chaos scenario (``cluster_scenarios.py``): a 3-node cluster of private
nodes on loopback, ``kill -9`` of the worker's node and of the queue's leader under load.
Nothing confirmed may be lost; duplicates are reported, not failed. About 2.5 minutes,
most of it forming the cluster."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterator

import pytest

from ..cluster import Cluster
from . import cluster_scenarios

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if shutil.which("rabbitmq-server") is None:
        reason = "the cluster scenario starts private RabbitMQ nodes: install rabbitmq-server"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with Cluster.started("rabbitq-cluster", size=3) as formed:
        yield formed


@pytest.mark.timeout(240)
@pytest.mark.parametrize("target", ["worker's node", "queue leader"])
async def test_killing_a_cluster_node_under_load_loses_nothing(cluster, tmp_path, target):
    result = await cluster_scenarios.kill_node(cluster, tmp_path, target=target, messages=1500)
    print(result.tally.summary(), result.recover_s, result.seconds, result.notes)
    # RabbitMQ 3.10.8 can strand messages that a retry queue dead-letters (at-least-once)
    # around a leader's death: the queue still counts them, but hands them to no one
    # (docs/reliability.md). Every message missing here must be one of those; anything
    # else is a loss.
    stuck = cluster_scenarios.stuck_of(result)
    assert len(result.tally.lost) <= stuck, (result.tally.summary(), result.notes)
    assert not result.tally.unexpected and not result.tally.pending, result.tally.summary()
    if target == "worker's node":
        result.tally.assert_nothing_lost()
    assert len(result.tally.published) == 1500, result.tally.summary()  # publishes waited
    assert not math.isnan(result.recover_s[0])
    assert "survived" in result.notes[1], result.notes
    assert "waiting (published, not yet handled) at the kill: about 0" not in result.notes[2]
