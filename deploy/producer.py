"""Traffic for deploy/docker-compose.yml: publish the email example's samples every few
seconds, and serve the publish metrics on ``/metrics`` for the dashboard's publish panels.

    python deploy/producer.py [--every SECONDS] [--metrics-port PORT]

Each round publishes :data:`examples.email_service.SAMPLES` (one is sent, one
hard-bounces to the DLQ, one is retried and then dead-lettered) through
``app.publisher(hooks=metrics)``. This process only publishes, so it exports only the
publish series (``rabbitq_published_total``, ``rabbitq_publish_errors_total``) and
``rabbitq_info``: the connection and consumer gauges belong to workers.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for `examples`

from examples.email_service import SAMPLES, app
from rabbitq import Metrics, RabbitqError

log = logging.getLogger("producer")
PUBLISH_ERRORS = ("unroutable", "nacked", "interrupted")


def publish_metrics() -> Metrics:
    """Metrics for a publisher: the publish series (at zero), nothing about consuming."""
    metrics = Metrics(CollectorRegistry())
    keep = {metrics.published_total, metrics.publish_errors, metrics.info}
    for collector in list(vars(metrics).values()):
        if hasattr(collector, "_labelnames") and collector not in keep:
            metrics.registry.unregister(collector)
    for type_name in {email.type_name() for email in SAMPLES}:
        metrics.published_total.labels(app.exchange, type_name)
        for error in PUBLISH_ERRORS:
            metrics.publish_errors.labels(app.exchange, type_name, error)
    return metrics


async def produce(metrics: Metrics, every: float) -> None:
    """Publish the samples every ``every`` seconds, forever; a failed round is logged."""
    while True:
        try:
            async with app.publisher(hooks=metrics) as pub:
                for email in SAMPLES:
                    await pub.publish(email)
            log.info("published %d sample emails", len(SAMPLES))
        except RabbitqError as exc:  # e.g. unroutable before the worker declared its queue
            log.warning("round failed: %s", exc)
        await asyncio.sleep(every)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=10.0, help="seconds between rounds")
    parser.add_argument("--metrics-port", type=int, default=9101)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    metrics = publish_metrics()
    start_http_server(args.metrics_port, registry=metrics.registry)
    asyncio.run(produce(metrics, args.every))


if __name__ == "__main__":
    main()
