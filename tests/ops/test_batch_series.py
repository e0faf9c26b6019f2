"""The batch handlers' series: started at zero by expect(), fed by batch_flushed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from rabbitq import App, Message, Metrics


class Row(Message, type="test.batch_series.row"):
    n: int


def test_a_batch_handlers_series_start_at_zero_and_count_each_batch_by_size_and_trigger():
    app = App(queue="rows", prefetch=100)

    @app.batch_handler(Row, max_size=50)
    async def store(rows: list[Row]) -> None: ...

    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.expect(app)
    labels = {"queue": "rows", "type": "test.batch_series.row"}
    assert registry.get_sample_value("rabbitq_batch_size_count", labels) == 0
    stopping = {**labels, "trigger": "stopping"}
    assert registry.get_sample_value("rabbitq_batches_total", stopping) == 0

    metrics.batch_flushed("rows", "test.batch_series.row", 50, "full")
    metrics.batch_flushed("rows", "test.batch_series.row", 3, "max_wait")
    assert registry.get_sample_value("rabbitq_batch_size_sum", labels) == 53
    assert registry.get_sample_value("rabbitq_batch_size_bucket", {**labels, "le": "5.0"}) == 1
    assert registry.get_sample_value("rabbitq_batch_size_bucket", {**labels, "le": "50.0"}) == 2
    assert registry.get_sample_value("rabbitq_batches_total", {**labels, "trigger": "full"}) == 1
