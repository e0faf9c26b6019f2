"""Keeper.redeclare without a broker: once however many copies notice, and for a quorum
topology only after the broker has had time to cancel the deleted queue's consumers."""

from __future__ import annotations

import asyncio

import pytest

from rabbitq._amqp.topology import plan
from rabbitq._worker import keeper as keeper_module
from rabbitq._worker.keeper import QUORUM_REDECLARE_WAIT, Keeper
from rabbitq.hooks import Hooks


class Redeclared(Hooks):
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def topology_redeclared(self, queue: str, reason: str) -> None:
        self.reasons.append(reason)


@pytest.mark.parametrize(
    ("queue_type", "wait"), [("quorum", QUORUM_REDECLARE_WAIT), ("classic", 0.0)]
)
async def test_redeclare_waits_for_a_quorum_topology_only_and_declares_once(
    monkeypatch, queue_type, wait
):
    topology = plan(
        queue="orders", exchange="x", delays_ms=[200], routing_keys=["k"], queue_type=queue_type
    )
    loop = asyncio.get_running_loop()
    declared: list[float] = []

    async def declare(channel: object, top: object) -> None:
        declared.append(loop.time())
        await asyncio.sleep(0.01)  # I/O: the other copies notice meanwhile

    monkeypatch.setattr(keeper_module, "declare", declare)
    hooks = Redeclared()
    keeper = Keeper(topology, hooks, declaring=lambda: object(), connection=lambda: None)  # type: ignore[arg-type,return-value]
    assert keeper.redeclare_wait == wait
    noticed = loop.time()
    await asyncio.gather(*(keeper.redeclare("unroutable") for _ in range(3)))
    assert len(declared) == 1 and keeper.redeclared == 1 and hooks.reasons == ["unroutable"]
    assert declared[0] - noticed >= wait
    if not wait:
        assert declared[0] - noticed < 0.1  # classic: at once, its dead letters have nowhere to go
