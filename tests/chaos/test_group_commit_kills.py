"""Workers killed with ``kill -9`` while the store's group commits are half done: a batch
of claims, done marks or releases committed in PostgreSQL, and neither its callers nor
the broker told (the worker SIGKILLs itself right after the statement, see
``once_service.KillingPostgresStore``). Real PostgreSQL, RabbitMQ and worker processes.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.effects.once_harness import OnceRun

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

KEYS = 150  # 450 messages: every key 3 times with one message id
PREFETCH = 32
# The kill points of the successive workers, two alive at a time; then plain workers.
PLANS = {
    "tx": ["claim:2", "release:2", "claim:4", "release:3"],
    "pg": ["done:2", "claim:2", "done:4", "claim:3"],
}


@pytest.mark.parametrize("mode", ["tx", "pg"])
async def test_workers_killed_with_batches_half_committed_lose_nothing_and_repeat_nothing(
    mode, uid, prefix, broker_url, pg, tmp_path
) -> None:
    log = tmp_path / "kills.log"
    log.touch()
    async with OnceRun(
        mode=mode,
        uid=uid,
        prefix=prefix,
        broker_url=broker_url,
        # tx: each key's first attempt fails, so that there are releases to batch (its
        # write rolls back); pg: no failures, as a failed attempt's outside effect stays.
        fail_first=mode == "tx",
        slow=0.05,
        prefetch=PREFETCH,
    ) as run:
        plan = list(PLANS[mode])
        env = {"ONCE_KILL_LOG": str(log)}
        run.spawn(ONCE_KILL_AT=plan.pop(0), **env)
        run.spawn(ONCE_KILL_AT=plan.pop(0), **env)
        await run.publish(KEYS)
        dead: set[int] = set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 40
        while loop.time() < deadline and (plan or len(await run.effects()) < KEYS):
            await asyncio.sleep(0.2)
            for proc in [p for p in run.workers if p.poll() is not None and p.pid not in dead]:
                dead.add(proc.pid)
                run.kills += 1
                run.spawn(**({"ONCE_KILL_AT": plan.pop(0), **env} if plan else {}))
        await run.settle(KEYS)
        await run.stop()
        count = await run.count(KEYS)
    killed = [line.split() for line in log.read_text().splitlines()]
    batches = ", ".join(f"{kind} of {len(keys)} keys" for kind, _, *keys in killed)
    print("\n" + count.line(f"{mode}, killed right after a batch committed ({batches})"))
    assert len(killed) >= 2 and count.kills == len(killed)  # the kills did land
    assert count.lost == 0
    if mode == "tx":
        assert count.effects_not_once == 0  # the effect commits with its done mark
        return
    # An effect outside the store: each kill can repeat the effects of the handlers caught
    # between their effect and their done mark (documented); a key whose done mark was in
    # the committed batch never runs again.
    assert count.duplicate_effects <= PREFETCH * count.kills
    for kind, last_id, *keys in killed:
        if kind == "done":
            assert not await run_after(prefix, pg, keys, int(last_id))


async def run_after(prefix: str, pg, keys: list[str], last_id: int) -> list[str]:
    """The keys among ``keys`` with an effect written after row ``last_id``."""
    cur = await pg.execute(
        f"SELECT key FROM {prefix}effects WHERE key = ANY(%s) AND id > %s", (keys, last_id)
    )
    return [r[0] for r in await cur.fetchall()]
