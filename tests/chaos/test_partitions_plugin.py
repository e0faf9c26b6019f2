"""A partitioned app on a broker without the consistent-hash exchange plugin (the chaos
node has no plugins): the worker and ``rabbitq doctor`` say how to enable it, in one
line."""

from __future__ import annotations

import pytest

from tests.helpers import one_line_error, run_cli

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
