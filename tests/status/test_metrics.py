"""``rabbitq_status_records_total{outcome}``: counted from the writer, and attached by the
worker wiring when the app has a status store and the worker serves metrics."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from rabbitq._ops.metrics import Metrics
from rabbitq._ops.run import WorkerSpec, build
from rabbitq.status.metrics import StatusMetrics
from rabbitq.status.writer import DROPPED, FAILED, WRITTEN


def test_every_outcome_starts_at_zero_and_counts_records():
    metrics = StatusMetrics()
    metrics.status_records(WRITTEN, 5)
    metrics.status_records(FAILED, 2)
    text = generate_latest(metrics.registry).decode()
    assert 'rabbitq_status_records_total{outcome="written"} 5.0' in text
    assert 'rabbitq_status_records_total{outcome="failed"} 2.0' in text
    assert f'rabbitq_status_records_total{{outcome="{DROPPED}"}} 0.0' in text


def test_the_worker_wiring_attaches_the_metric_to_the_apps_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "rq_status_metrics_app.py").write_text(
        textwrap.dedent("""
            from rabbitq import App, Message
            from rabbitq.status import RedisStatus

            class Ping(Message, type="unit.status.ping"):
                n: int

            app = App(queue="unit-status-metrics", status=RedisStatus())
            app.handler(Ping)(lambda m: None)
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        metrics = Metrics()
        worker = build(WorkerSpec(app_spec="rq_status_metrics_app:app"), metrics=metrics)
        writer = worker.app.status_writer
        assert writer is not None and len(writer.observers) == 1
        writer.observers[0].status_records(WRITTEN, 3)
        text = generate_latest(metrics.registry).decode()
        assert 'rabbitq_status_records_total{outcome="written"} 3.0' in text
    finally:
        sys.modules.pop("rq_status_metrics_app", None)
