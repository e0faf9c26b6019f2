"""The schedule metrics: on the registry given, every series at zero from the start."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import CollectorRegistry

from rabbitq import App
from rabbitq.schedule import ScheduleMetrics
from rabbitq.schedule.runner import Scheduler


def test_every_schedule_series_starts_at_zero_on_the_registry_given():
    app = App(queue="schedule-metrics", url="amqp://guest:guest@127.0.0.1:5672/")
    app.schedule(every=timedelta(seconds=1), name="beat")(lambda tick: None)
    registry = CollectorRegistry()
    Scheduler(app, metrics=ScheduleMetrics(registry))  # no I/O until run()
    labels = {"schedule": "beat"}
    assert registry.get_sample_value("rabbitq_schedule_ticks_published_total", labels) == 0
    assert registry.get_sample_value("rabbitq_schedule_ticks_late_total", labels) == 0
    assert registry.get_sample_value("rabbitq_schedule_tick_lateness_seconds_count", labels) == 0
    for reason in ("catch_up", "error"):
        labelled = {**labels, "reason": reason}
        assert registry.get_sample_value("rabbitq_schedule_ticks_skipped_total", labelled) == 0
    assert registry.get_sample_value("rabbitq_schedule_leader") == 0
    assert registry.get_sample_value("rabbitq_schedule_takeovers_total") == 0
