"""The benchmark harness keeps working: a tiny run of every scenario (not a timed test:
the figures are not checked, only that each comparison produced them)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


# 110 s was too little for the run on a loaded 2-core machine (timed out once there).
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_harness_runs_every_scenario_at_a_tiny_size_and_reports_json(broker_url):
    out = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--n", "200", "--rounds", "1", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "RABBITQ_URL": broker_url},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["errors"] == {}
    measured = {row["comparison"] for row in report["rows"]}
    assert {"consume", "publish_many", "retry path", "latency @1000/s"} <= measured
    assert {"RSS prefetch 256", "RSS prefetch 2048"} <= measured
    for row in report["rows"]:
        for side in ("baseline_median", "rabbitq_median"):
            assert isinstance(row[side], float) and math.isfinite(row[side]), row
    # Comparisons that need a missing piece say why instead of failing.
    for name, why in report["skipped"].items():
        assert why, name


def test_a_quick_run_says_its_figures_are_not_a_verdict_on_the_targets(broker_url):
    out = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "consume", "--n", "200",
         "--rounds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=110,
        env={**os.environ, "RABBITQ_URL": broker_url},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("note: --quick is a look, not a measurement"), out.stdout
    assert "targets are checked in full mode only" in last
