"""The dashboard and the alert rules against a real Prometheus scraping a real worker.

A worker (with :class:`~rabbitq.Metrics` and ``/metrics`` served on a free port, exactly
what ``rabbitq worker --metrics-port`` runs; behind a TCP proxy; with an idempotency
store, rate and concurrency limits and the outbox's metrics, so that every optional
panel has its series) handles a known mix: successes, a retry that then succeeds,
retries that run out, a PermanentError, an invalid payload, an unknown type, a retry
copy sent into a connection that is then cut (requeued, and a reconnect) and an
unroutable publish; then an operator deletes its (empty) queue, and the worker declares
it again. A
private Prometheus (the ``prometheus`` binary, its own temp dir and free port, scraping
every second, evaluating a copy of alerts.yml every second with each ``for:`` cut to
1 s) scrapes it. Then, through Prometheus's HTTP API:

- every query of every dashboard panel, with ``$queue``/``$type`` set as Grafana sets
  them and ``$__rate_interval``/``$__range`` a window over the whole run, is valid and
  returns at least one series, with every label its legend names;
- every alert rule's signal (its expression without the threshold comparisons, e.g.
  ``max by (queue) (rabbitq_queue_messages{kind="dlq"})`` for ``... > 0``) is valid and
  returns at least one series; the DLQ alerts' full conditions hold on this data (and
  the alerts that would mean an unhealthy worker do not);
- the safety panels show the re-declared queue, and nothing held, blocked or abandoned;
- and ``/api/v1/alerts`` shows both DLQ alerts and RabbitqQueueRedeclared firing,
  evaluated by Prometheus itself: the re-declare counter started at zero, so increase()
  sees its first step.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import pytest
import yaml
from prometheus_client import CollectorRegistry

from rabbitq import (
    Context,
    Message,
    Metrics,
    PermanentError,
    Publisher,
    RetryPolicy,
    Unroutable,
    Worker,
    serve_metrics,
)
from rabbitq._ops.queue_watch import QueueWatch
from rabbitq.effects import RedisStore
from rabbitq.effects.metrics import OutboxMetrics
from tests import promql
from tests.chaos.proxy import FaultyProxy
from tests.helpers import publish_bare, running, wait_for
from tests.prometheus_server import SCRAPE, Prom, prometheus_or_skip, run_prometheus

pytestmark = [pytest.mark.broker, pytest.mark.slow]

WINDOW = "1m"  # $__rate_interval and $__range: longer than the whole run
DEADLINE = 45.0  # seconds for any one wait below


class Job(Message, type="test.prom.job"):
    plan: (
        str  # ok | flaky (fails its first attempt) | gated (flaky, after a gate) | fail | permanent
    )


class Batched(Message, type="test.prom.batched"):
    n: int = 0


class Unbound(Message, type="test.prom.unbound"):
    """No queue is bound for it: publishing it is unroutable."""

    n: int


# What the worker ends with (see publish_mix): 13 deliveries settled.
SUCCESS, RETRIED, DEAD = 5, 4, 4
REASONS = {"exhausted", "permanent", "invalid", "unknown-type"}


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    return prometheus_or_skip()


def rules_for_test(dest: Path) -> Path:
    """alerts.yml with every ``for:`` cut to 1 s, so that alerts fire within seconds."""
    data = yaml.safe_load(promql.ALERTS.read_text())
    for group in data["groups"]:
        group["interval"] = SCRAPE
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "1s"
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def requeue_once(proxy: FaultyProxy, app, metrics: Metrics, pub: Publisher,
                       gate: asyncio.Event, failed: asyncio.Event) -> None:  # fmt: skip
    """A retry copy the broker never confirms: the delivery goes back to its queue.

    The worker reaches the broker through ``proxy``. A "gated" job's handler waits at
    ``gate``; the proxy stops forwarding, the gate opens, the handler fails its first
    attempt and its retry copy goes into the stalled connection; then the proxy cuts
    it. The worker counts the delivery as returned (rabbitq_messages_requeued_total),
    reconnects (rabbitq_reconnects_total) and gets it again; its retry then goes
    through and the second attempt succeeds. (A deleted retry queue no longer does it:
    the worker declares its queues again and sends the copy once more.)
    """
    in_flight = {"queue": app.queue}
    await pub.publish(Job(plan="gated"))
    await wait_for(lambda: sample(metrics, "rabbitq_messages_in_flight", **in_flight) == 1,
                   timeout=DEADLINE)  # fmt: skip
    proxy.stall()
    gate.set()
    # Its handler failed (the delivery stays in flight until its copy is confirmed and
    # it is acked: rabbitq_messages_in_flight counts a delivery until it is settled).
    await asyncio.wait_for(failed.wait(), timeout=DEADLINE)
    await asyncio.sleep(0.5)  # the copy is in the stalled connection, unconfirmed
    assert proxy.cut() >= 1
    requeued = {"queue": app.queue, "type": Job.type_name()}
    await wait_for(
        lambda: sample(metrics, "rabbitq_messages_requeued_total", **requeued) >= 1,
        timeout=DEADLINE,
    )
    await wait_for(lambda: sample(metrics, "rabbitq_reconnects_total") >= 1, timeout=DEADLINE)


async def publish_mix(broker_url: str, app, pub: Publisher) -> None:
    """Successes, a retry that succeeds, retries that run out, a permanent error, an
    invalid payload, an unknown type, and an unroutable publish."""
    for plan in ("ok", "ok", "ok", "flaky", "fail", "permanent"):
        await pub.publish(Job(plan=plan))
    await publish_bare(
        broker_url, app.exchange, Job.type_name(), b'{"plan": 5}', type=Job.type_name()
    )
    await publish_bare(broker_url, "", app.queue, b"{}", type="test.prom.nobody")
    with pytest.raises(Unroutable):
        await pub.publish(Unbound(n=1))


async def delete_queue_under_the_worker(broker_url: str, app, metrics: Metrics) -> None:
    """An operator deletes the app's (empty) main queue: the broker cancels the worker's
    consumer, and the worker declares its queues again and consumes again."""
    connection = await aio_pika.connect(broker_url)
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(app.queue)
    redeclared = {"queue": app.queue, "reason": "consumer_cancelled"}
    await wait_for(
        lambda: sample(metrics, "rabbitq_topology_redeclared_total", **redeclared) == 1,
        timeout=DEADLINE,
    )
    await wait_for(
        lambda: sample(metrics, "rabbitq_consuming", queue=app.queue) == 1, timeout=DEADLINE
    )


@contextlib.asynccontextmanager
async def proxied(broker_url: str) -> AsyncIterator[FaultyProxy]:
    """A proxy to the broker that can stall and cut the worker's connection."""
    proxy = await FaultyProxy.start(urllib.parse.urlsplit(broker_url).port or 5672)
    try:
        yield proxy
    finally:
        await proxy.close()


def substitutions(app) -> list[dict[str, str]]:
    """The variable values to run every panel with: one queue with all types, and all
    queues with one type, written as Grafana writes them."""
    return [
        {"queue": promql.grafana_regex_value(app.queue), "type": ".*"},
        {"queue": ".*", "type": promql.grafana_regex_value(Job.type_name())},
    ]


async def test_every_dashboard_query_and_alert_returns_series_from_a_real_worker(
    make_app, broker_url, tmp_path, prometheus_binary
):
    # An idempotency store (keys expire after a minute), so that the duplicates series
    # exists, as it does for any app with a store.
    store = RedisStore(key_prefix=f"t:{uuid.uuid4().hex[:10]}:", retention=60)
    app = make_app(retry=RetryPolicy(delays=(0.2, 0.4)), prefetch=8, idempotency=store)
    gate, failed_gated = asyncio.Event(), asyncio.Event()

    # Limits, so that the rate-limit panels have series (only limited handlers do).
    @app.handler(Job, timeout=10, rate_limit="1000/s", concurrency=2)
    async def handle(job: Job, ctx: Context) -> None:
        if job.plan == "gated":
            await gate.wait()
        await asyncio.sleep(0.01)
        if job.plan == "ok" or (job.plan in ("flaky", "gated") and ctx.attempt > 1):
            return
        if job.plan == "permanent":
            raise PermanentError("declined")
        if job.plan == "gated":
            failed_gated.set()
        raise RuntimeError("provider unavailable")

    # A batch handler, so that the batch sizes panel has series (only batch handlers do).
    @app.batch_handler(Batched, max_size=4, max_wait=0.05)
    async def handle_batch(items: list[Batched]) -> None: ...

    metrics = Metrics(CollectorRegistry())
    # The outbox relay's series, on the same registry (as a relay serves them).
    OutboxMetrics("rabbitq_outbox", registry=metrics.registry)
    dlq = app.topology().dlq.name
    async with proxied(broker_url) as proxy:
        worker = Worker(app, url=proxy.url(broker_url), hooks=metrics)
        async with (
            serve_metrics(worker, metrics, port=0, bind="127.0.0.1", sample_interval=0.5) as server,
            running(worker),
        ):
            async with run_prometheus(
                prometheus_binary,
                tmp_path,
                f"127.0.0.1:{server.port}",
                rules_for_test(tmp_path / "alerts.yml"),
            ) as base:
                prom = Prom(base)
                # Traffic starts once Prometheus scrapes the worker (whose series start at 0).
                await wait_for(prom.ready, timeout=DEADLINE)
                await wait_for(lambda: _equals(prom, 'up{job="rabbitq"}', 1), timeout=DEADLINE)
                async with Publisher(app, url=broker_url, hooks=metrics) as pub:
                    await requeue_once(proxy, app, metrics, pub, gate, failed_gated)
                    await publish_mix(broker_url, app, pub)

                # The worker has settled everything, and Prometheus has scraped that.
                total = SUCCESS + RETRIED + DEAD
                processed = "rabbitq_messages_processed_total"
                await wait_for(
                    lambda: (
                        sum(
                            sample(metrics, processed, queue=app.queue, type=t, outcome=o)
                            for t in (Job.type_name(), "unknown")
                            for o in ("success", "retried", "dead_lettered")
                        )
                        == total
                    ),
                    timeout=DEADLINE,
                )
                await wait_for(
                    lambda: _equals(prom, f'sum({processed}{{queue="{app.queue}"}})', total),
                    timeout=DEADLINE,
                )
                await wait_for(
                    lambda: _equals(prom, f'rabbitq_queue_messages{{queue="{dlq}"}}', DEAD),
                    timeout=DEADLINE,
                )
                # Its queue is empty now: an operator deletes it under the worker.
                await delete_queue_under_the_worker(broker_url, app, metrics)
                # Two more scrapes, so that rate() has two samples of every series, the
                # last-born included.
                scraped = 'timestamp(up{job="rabbitq"})'
                last = await prom.value(scraped)
                assert last is not None
                await wait_for(lambda: _at_least(prom, scraped, last + 2), timeout=DEADLINE)
                by_outcome = {
                    r["metric"]["outcome"]: float(r["value"][1])
                    for r in await prom.query(
                        f'sum by (outcome) ({processed}{{queue="{app.queue}"}})'
                    )
                }
                assert by_outcome == {"success": SUCCESS, "retried": RETRIED, "dead_lettered": DEAD}
                requeued = f'sum(rabbitq_messages_requeued_total{{queue="{app.queue}"}})'
                assert (await prom.value(requeued) or 0) >= 1
                assert (await prom.value("sum(rabbitq_reconnects_total)") or 0) >= 1
                waited = f'sum(rabbitq_limit_wait_seconds_count{{queue="{app.queue}"}})'
                assert (await prom.value(waited) or 0) >= SUCCESS + RETRIED  # each waited its turn

                # The queue watch's series: the shared broker has no management API, so
                # the watch reads the DLQ as one would answer for it (no policy).
                await QueueWatch(app.topology(), PolicyFree(app), metrics).round()
                await wait_for(
                    lambda: _at_least(prom, "count(rabbitq_dlq_drop_risk)", 1), timeout=DEADLINE
                )
                await check_dashboard(prom, app)
                await check_safety_panels(prom, app)
                await check_alert_expressions(prom, app, dlq)
                await check_dlq_alerts_fire(prom, app, dlq)
    await store.close()


class PolicyFree:
    """A stand-in for the management API (``rabbitq._ops.doctor_probe.Management``): each
    of the app's queues as declared, without a policy, with nothing held."""

    vhost, base, password = "/", "http://stand-in", ""

    def __init__(self, app) -> None:
        self.arguments = {q.name: dict(q.arguments) for q in app.topology().queues}

    def get(self, path: str) -> dict[str, Any]:
        if "?" in path:  # the delay ladder's levels, listed in one page: none holds any
            return {"items": [], "filtered_count": 0}
        name = urllib.parse.unquote(path.rsplit("/", 1)[1])
        counts = {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0}
        return {"arguments": self.arguments[name], "effective_policy_definition": {}, **counts}


async def _equals(prom: Prom, expr: str, want: float) -> bool:
    return await prom.value(expr) == want


async def _at_least(prom: Prom, expr: str, want: float) -> bool:
    value = await prom.value(expr)
    return value is not None and value >= want


async def check_dashboard(prom: Prom, app) -> None:
    board = promql.dashboard()
    for variable in promql.variables(board).values():
        if variable["type"] != "query":
            continue
        # label_values(SELECTOR, LABEL): the series SELECTOR picks must carry LABEL
        query = promql.variable_query(variable)
        selector, label = re.fullmatch(r"label_values\((.*), (\w+)\)", query).groups()
        for values in substitutions(app):
            expr = promql.substitute(selector, values, rate_interval=WINDOW)
            found = {r["metric"].get(label) for r in await prom.query(expr)}
            assert found - {None}, f"variable {variable['name']}: {expr!r} has no {label!r}"
    for target in promql.targets(board):
        for values in substitutions(app):
            expr = promql.substitute(target.expr, values, rate_interval=WINDOW)
            result = await prom.query(expr)
            assert result, f"panel {target.panel!r}: no series for {expr!r}"
            for label in promql.LEGEND_LABEL.findall(target.legend):
                for series in result:
                    assert label in series["metric"], (
                        f"panel {target.panel!r}: legend {{{{{label}}}}} but {series['metric']}"
                    )


async def check_alert_expressions(prom: Prom, app, dlq: str) -> None:
    rules = {rule["alert"]: rule["expr"] for rule in promql.alert_rules()}
    for name, expr in rules.items():
        signal = promql.signal(expr)
        assert signal != expr, f"{name}: no threshold found in {expr!r}"
        assert await prom.query(signal), f"{name}: no series for its signal {signal!r}"
    # The conditions themselves, on this data: the DLQ has messages and got them now ...
    dead = await prom.query(rules["RabbitqDeadLetters"])
    assert {r["metric"]["reason"] for r in dead if r["metric"]["queue"] == app.queue} == REASONS
    (not_empty,) = await prom.query(rules["RabbitqDeadLetterQueueNotEmpty"])
    assert not_empty["metric"] == {"queue": dlq} and float(not_empty["value"][1]) == DEAD
    (failed,) = await prom.query(rules["RabbitqPublishErrors"])
    assert failed["metric"] == {"exchange": app.exchange, "error": "unroutable"}
    # ... and the worker is healthy: up, connected, consuming, fast, breaker closed.
    for healthy in (
        "RabbitqWorkerDown",
        "RabbitqDisconnected",
        "RabbitqBacklogWithoutConsumers",
        "RabbitqConnectionFlapping",
        "RabbitqHandlerSlow",
        "RabbitqCircuitOpen",
        "RabbitqOutboxStuck",
        "RabbitqBrokerBlocked",
        "RabbitqCopiesHeld",
        "RabbitqHandlerThreadsAbandoned",
    ):
        assert await prom.query(rules[healthy]) == [], healthy
    # ... but an operator deleted its queue, and the worker declared it again.
    (redeclared,) = await prom.query(rules["RabbitqQueueRedeclared"])
    assert redeclared["metric"] == {"queue": app.queue, "reason": "consumer_cancelled"}


def legend(template: str, labels: dict[str, str]) -> str:
    """A series' name in a panel's legend, as Grafana writes it (``{{queue}} {{reason}}``)."""
    return promql.LEGEND_LABEL.sub(lambda m: labels[m.group(1)], template)


async def check_safety_panels(prom: Prom, app) -> None:
    """The Safety row, read as an operator would: the deleted queue shows, and no copy is
    held, the broker blocks nobody and no handler thread is abandoned."""
    board = promql.dashboard()
    values = {"queue": promql.grafana_regex_value(app.queue), "type": ".*"}

    async def read(title: str) -> dict[str, float]:
        """The panel's series now, by their legend."""
        (target,) = [t for t in promql.targets(board) if t.panel == title]
        expr = promql.substitute(target.expr, values, rate_interval=WINDOW)
        result = await prom.query(expr)
        assert result, f"panel {title!r}: no series for {expr!r}"
        return {legend(target.legend, r["metric"]): float(r["value"][1]) for r in result}

    redeclared = await read("Queues re-declared")
    assert redeclared[f"{app.queue} consumer_cancelled"] > 0, redeclared
    assert redeclared[f"{app.queue} unroutable"] == 0, redeclared
    assert await read("Copies held") == {app.queue: 0}
    assert set((await read("Broker blocking publishers")).values()) == {0}
    assert await read("Abandoned handler threads") == {app.queue: 0}


async def check_dlq_alerts_fire(prom: Prom, app, dlq: str) -> None:
    """Prometheus itself evaluates the rules and fires both DLQ alerts, and the alert for
    the deleted queue."""

    async def firing() -> set[tuple[str, str, str]]:
        return {
            (a["labels"]["alertname"], a["labels"]["queue"], a["labels"].get("reason", ""))
            for a in await prom.alerts()
            if a["state"] == "firing" and "queue" in a["labels"]
        }

    want = {("RabbitqDeadLetters", app.queue, reason) for reason in REASONS}
    want.add(("RabbitqDeadLetterQueueNotEmpty", dlq, ""))
    want.add(("RabbitqQueueRedeclared", app.queue, "consumer_cancelled"))
    await wait_for(lambda: _superset(firing(), want), timeout=DEADLINE, interval=0.5)


async def _superset(got, want: set) -> bool:
    return want <= await got
