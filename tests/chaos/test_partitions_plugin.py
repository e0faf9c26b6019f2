"""A partitioned app on a broker without the consistent-hash exchange plugin (the chaos
node has no plugins): the worker and ``rabbitq doctor`` say how to enable it, in one
line, and a test whose worker subprocess dies of it fails with that line first."""

from __future__ import annotations

import os
import sys

import pytest

from tests.helpers import ROOT, one_line_error, run_cli, spawn_logged, wait_for

ENABLE = "rabbitmq-plugins enable rabbitmq_consistent_hash_exchange"


@pytest.mark.parametrize("processes", [[], ["--processes", "2"]], ids=["one", "supervised"])
def test_the_worker_stops_with_one_line_that_says_how_to_enable_the_plugin(
    chaos_node, processes
):
    done = run_cli("worker", "examples.ledger:app", *processes, url=chaos_node.url, timeout=60)

    assert done.returncode != 0
    line = one_line_error(done.stderr)
    assert "x-consistent-hash" in line and ENABLE in line


def test_doctor_reports_the_missing_plugin_as_a_danger(chaos_node):
    done = run_cli("doctor", "examples.ledger:app", url=chaos_node.url, timeout=60)

    assert done.returncode != 0
    [line] = [line for line in done.stdout.splitlines() if "[partitions]" in line]
    assert line.startswith("DANGER") or line.lower().startswith("danger"), done.stdout
    assert ENABLE in done.stdout


async def test_a_test_whose_worker_subprocess_dies_fails_with_the_workers_last_line(
    chaos_node, tmp_path
):
    log = tmp_path / "worker.log"
    env = {**os.environ, "RABBITQ_URL": chaos_node.url, "NO_COLOR": "1"}
    proc = spawn_logged(
        [sys.executable, "-m", "rabbitq", "worker", "examples.ledger:app"], log, cwd=ROOT, env=env
    )
    try:
        with pytest.raises(AssertionError) as failed:
            await wait_for(lambda: False, timeout=60, running=[(proc, log)])
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)

    first, *rest = str(failed.value).splitlines()  # what pytest's short summary shows
    assert first.startswith(f"the worker (pid {proc.pid}) exited with 1: Error: "), first
    assert ENABLE in first
    assert rest and rest[0] == f"--- last lines of {log} ---"
