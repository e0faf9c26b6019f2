"""examples/README's ledger flow through the real ``rabbitq`` command (issue 33, item 1):
``rabbitq worker ... --processes 2``, ``python -m examples.ledger``, ``rabbitq dlq
replay``. A replayed message lifts its key's block only if it is the message that
blocked it: the replayed overdraft (#2) fails again and blocks ``acct-3`` again, and the
deposit behind it (#3) goes back to the DLQ as ``blocked``, never applied before #2;
``rabbitq dlq replay --unblock`` (the operator's explicit choice) then runs #2 and #3,
in that order."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aio_pika
import pytest

from rabbitq._amqp.teardown import delete

from ...helpers import ROOT, assert_running, run_cli_async, spawn_logged, wait_for
from .ledger_cli_app import create_app

pytestmark = pytest.mark.broker

PARTITIONS = 4  # examples/ledger.py's


@pytest.fixture(scope="module")
def broker_url(hash_broker_url: str) -> str:
    """A broker with the consistent-hash exchange plugin (the ledger has partitions)."""
    return hash_broker_url


@pytest.fixture
def names(uid: str) -> dict[str, str]:
    return {"LEDGER_TEST_QUEUE": f"t-{uid}-ledger", "EXAMPLES_EXCHANGE": f"t.{uid}.examples"}


@pytest.fixture
def worker(broker_url: str, names: dict[str, str], tmp_path: Path) -> Iterator[tuple]:
    log = tmp_path / "worker.log"
    env = {**os.environ, **names, "RABBITQ_URL": broker_url, "NO_COLOR": "1"}
    proc = spawn_logged(
        [sys.executable, "-m", "rabbitq", "worker", "tests.integration.dlq.ledger_cli_app:app",
         "--processes", "2"],
        log, cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def dead(queue: str, broker_url: str) -> list[dict]:
    """``rabbitq dlq list QUEUE --json``: the DLQ's messages, oldest first."""
    done = await run_cli_async("dlq", "list", queue, "--limit", "0", "--json", url=broker_url)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # one document: an array


async def replayed(queue: str, message_id: str, broker_url: str) -> list[int]:
    """``rabbitq-replayed`` of each DLQ copy of ``message_id`` (``dlq show --json``)."""
    done = await run_cli_async("dlq", "show", queue, message_id, "--json", url=broker_url)
    assert done.returncode == 0, done.stderr
    records = [m["record"] for m in json.loads(done.stdout)]  # an array of the copies
    return [int(r["headers"].get("rabbitq-replayed", 0)) for r in records]


def applied(log: Path) -> list[str]:
    """The ledger's "acct-3 #N ..." lines, in the order the worker logged them."""
    lines = log.read_text(errors="replace").splitlines()
    return [line for line in lines if "acct-3 #" in line]


async def test_a_replay_never_lets_a_blocked_deposit_overtake_the_overdraft(
    broker_url, names, worker, connection
):
    proc, log = worker
    queue = names["LEDGER_TEST_QUEUE"]
    env = {**names, "RABBITQ_URL": broker_url}
    app = create_app(queue=queue, exchange=names["EXAMPLES_EXCHANGE"], url=broker_url)

    async def consumed() -> bool:
        assert_running(proc, log)
        channel = await connection.channel()
        try:
            for p in range(PARTITIONS):
                q = await channel.declare_queue(f"{queue}.p{p}", passive=True)
                if not q.declaration_result.consumer_count:
                    return False
            return True
        except aio_pika.exceptions.ChannelClosed:
            return False
        finally:
            if not channel.is_closed:
                await channel.close()

    try:
        await wait_for(consumed, timeout=90)
        published = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "examples.ledger"], cwd=ROOT,
            env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert published.returncode == 0, published.stderr

        # First run: the overdraft dead, the deposit behind it blocked.
        async def first() -> bool:
            assert_running(proc, log)
            return len(await dead(queue, broker_url)) == 2

        await wait_for(first, timeout=60)
        found = await dead(queue, broker_url)
        assert [(m["type"], m["reason"]) for m in found] == [
            ("ledger.withdraw", "permanent"), ("ledger.deposit", "blocked")
        ], found  # fmt: skip
        overdraft, deposit = found[0]["message_id"], found[1]["message_id"]

        # A replay without --unblock: #2 fails again and blocks again; #3 goes back.
        done = await run_cli_async("dlq", "replay", queue, url=broker_url, env=env)
        assert done.returncode == 0, done.stdout + done.stderr

        async def again() -> bool:  # both back in the DLQ, or #3 applied (the old bug)
            assert_running(proc, log)
            if any("acct-3 #3" in line for line in applied(log)):
                return True
            if len(await dead(queue, broker_url)) != 2:
                return False
            counts = [await replayed(queue, m, broker_url) for m in (overdraft, deposit)]
            return counts == [[1], [1]]

        await wait_for(again, timeout=60)
        assert not [line for line in applied(log) if "acct-3 #3" in line], applied(log)
        found = await dead(queue, broker_url)
        assert [(m["message_id"], m["reason"]) for m in found] == [
            (overdraft, "permanent"), (deposit, "blocked")
        ], found  # fmt: skip
        assert overdraft in found[1]["error"], found[1]  # blocked behind #2, again

        # --unblock: #2 runs (fails again, this sample's balance never covers it), then
        # #3 lifts the block as the operator asked and is applied: 10 + 60.
        done = await run_cli_async("dlq", "replay", queue, "--unblock", url=broker_url, env=env)
        assert done.returncode == 0, done.stdout + done.stderr

        async def unblocked() -> bool:
            assert_running(proc, log)
            return any("acct-3 #3 +60.00 = 70.00" in line for line in applied(log))

        await wait_for(unblocked, timeout=60)

        async def settled() -> bool:
            found = await dead(queue, broker_url)
            return [(m["message_id"], m["reason"]) for m in found] == [(overdraft, "permanent")]

        await wait_for(settled, timeout=60)
        text = log.read_text(errors="replace")
        # #2's third failure (its second replay) blocked the key again before #3 was
        # applied. (Its "dead-lettered to" line is written once its DLQ copy is
        # confirmed, which may come after #3 ran: the block is the failure's own line.)
        last_overdraft = text.rfind(f"blocked: message {overdraft}")
        assert 0 <= last_overdraft < text.find("acct-3 #3 +60.00"), text[-4000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 60)
        await delete(connection, app.topology(), force=True)
