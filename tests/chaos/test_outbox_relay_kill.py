"""The outbox relay killed with ``kill -9`` mid-batch and restarted: every row is
published, duplicates bounded by a batch per kill (the real PostgreSQL and RabbitMQ;
moved here from tests/effects/test_outbox.py with the other kill tests)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

from tests.effects.conftest import Note, all_sent, received
from tests.helpers import exit_report, spawn_logged, wait_for


def _relay(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return spawn_logged(
        [sys.executable, "-m", "tests.effects.relay_proc", *args],
        log,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )


@pytest.mark.slow
async def test_a_relay_killed_mid_batch_and_restarted_publishes_every_row(
    make_outbox, pg, bound, pg_url, prefix, broker_url, tmp_path
) -> None:
    """Counted: every row arrives, and the duplicates are bounded by the batch per kill."""
    app, queue = bound
    outbox = make_outbox(app)
    rows = 600
    async with pg.transaction():
        for i in range(rows):
            await outbox.publish(pg, Note(seq=i, key=f"k{i % 7}"), key=f"k{i % 7}")
    args = [pg_url, prefix, broker_url, app.exchange]
    kills = 0
    # 1. killed by itself between the confirms of a batch and marking it sent
    log = tmp_path / "relay.log"
    proc = _relay([*args, "--die-after-publish"], log)
    assert proc.wait(60) == -signal.SIGKILL, exit_report(proc, log, "the relay")
    kills += 1
    # 2. killed from outside at random moments
    rnd = random.Random(13)
    for _ in range(3):
        proc = _relay(args, log)
        await asyncio.sleep(rnd.uniform(0.3, 1.2))
        proc.kill()
        proc.wait(30)
        kills += 1
    # 3. a relay that is left to finish
    proc = _relay(args, log)
    try:
        await wait_for(lambda: all_sent(outbox), timeout=90, running=[(proc, log)])
    finally:
        proc.terminate()  # SIGTERM: a clean stop (or, before it set up, the default exit)
        proc.wait(30)
    messages = await received(queue)
    counts = Counter(m.message_id for m in messages)
    seqs = {orjson.loads(m.body)["seq"] for m in messages}
    duplicates = sum(counts.values()) - len(counts)
    print(
        f"outbox relay crash: rows={rows} published={len(messages)} unique={len(counts)} "
        f"lost={rows - len(seqs)} duplicates={duplicates} kills={kills} batch=50"
    )
    assert seqs == set(range(rows))  # 0 lost
    assert len(counts) == rows
    assert duplicates <= kills * 50  # bounded by one batch per kill
    assert duplicates >= 1  # the self-kill after the confirms re-sends its batch
