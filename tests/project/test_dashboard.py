"""The Grafana dashboard and its provisioning, checked as files: every panel has a data
source and queries, the variables exist, and every metric and label the queries name is
one the code exports. (tests/integration/ops/test_prometheus_live.py runs the queries.)"""

from __future__ import annotations

import json

import pytest
import yaml

from tests import promql

UID = "rabbitq-overview"  # links and bookmarks depend on it: never change it
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# One query (at least) per thing the dashboard promises, by the metric that shows it.
PROMISED = {
    "throughput by outcome": "rabbitq_messages_processed_total",
    "received": "rabbitq_messages_received_total",
    "requeued": "rabbitq_messages_requeued_total",
    "handler latency": "rabbitq_handler_duration_seconds_bucket",
    "in flight": "rabbitq_messages_in_flight",
    "prefetch": "rabbitq_prefetch",
    "retries by tier": "rabbitq_retries_total",
    "dead letters by reason": "rabbitq_dead_letters_total",
    "queue depths": "rabbitq_queue_messages",
    "consumers": "rabbitq_queue_consumers",
    "publish rate": "rabbitq_published_total",
    "publish errors": "rabbitq_publish_errors_total",
    "connection status": "rabbitq_connection_up",
    "reconnects": "rabbitq_reconnects_total",
    "consuming": "rabbitq_consuming",
    "circuit breaker": "rabbitq_circuit_open",
    "versions": "rabbitq_info",
    "duplicates skipped": "rabbitq_duplicates_total",
    "outbox age": "rabbitq_outbox_oldest_pending_seconds",
    "outbox pending": "rabbitq_outbox_pending",
    "outbox relay errors": "rabbitq_outbox_relay_errors_total",
    "rate-limit wait": "rabbitq_limit_wait_seconds_bucket",
    "limited handlers running": "rabbitq_limit_concurrency",
    # the safety signals: a worker paused on a refused copy, a broker alarm, a deleted
    # queue declared again, sync handlers hung past their timeout
    "copies held": "rabbitq_copies_held",
    "broker blocking publishers": "rabbitq_connection_blocked",
    "queues re-declared": "rabbitq_topology_redeclared_total",
    "abandoned handler threads": "rabbitq_handler_threads_abandoned",
    "batch sizes": "rabbitq_batch_size_bucket",
}


@pytest.fixture(scope="module")
def board() -> dict:
    return promql.dashboard()


def test_the_dashboard_has_a_stable_uid_and_a_title(board):
    assert board["uid"] == UID
    assert board["title"] == "rabbitq"
    assert board.get("id") is None  # an exported id would clash on import


def test_the_datasource_queue_and_type_variables_exist(board):
    variables = promql.variables(board)
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name, label in (("queue", "queue"), ("type", "type")):
        var = variables[name]
        assert var["type"] == "query"
        assert var["datasource"] == DATASOURCE
        assert var["multi"] and var["includeAll"] and var["allValue"] == ".*"
        assert promql.variable_query(var).startswith("label_values(")
        assert promql.variable_query(var).endswith(f", {label})")


def test_every_panel_has_the_datasource_variable_and_queries(board):
    panels = promql.panels(board)
    assert len(panels) >= 15
    for panel in panels:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel.get("targets"), f"{panel['title']!r} has no queries"
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_panel_ids_are_unique_and_panels_do_not_overlap(board):
    ids = [p["id"] for p in board["panels"]]
    assert len(set(ids)) == len(ids)
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not mine & cells, f"{panel['title']!r} overlaps another panel"
        cells |= mine


def test_every_metric_the_dashboard_names_is_exported_by_the_code(board):
    exported = promql.exported()
    queries = [t.expr for t in promql.targets(board)]
    queries += [
        promql.variable_query(v) for v in promql.variables(board).values() if v["type"] == "query"
    ]
    for expr in queries:
        names = promql.metric_names(expr)
        assert names, f"no rabbitq metric in {expr!r}"
        assert names <= exported.keys(), f"not exported: {names - exported.keys()} in {expr!r}"
        known = set().union(*(exported[n] for n in names))
        assert promql.label_names(expr) <= known, f"unknown label in {expr!r}"


def test_the_dashboard_shows_everything_it_promises(board):
    used = set().union(*(promql.metric_names(t.expr) for t in promql.targets(board)))
    missing = {what: name for what, name in PROMISED.items() if name not in used}
    assert not missing
    titles = {p["title"] for p in promql.panels(board)}
    for title in (
        "Throughput by outcome",
        "Success ratio",
        "Handler latency",
        "In flight vs prefetch",
        "Retries by tier",
        "Dead letters by reason",
        "DLQ depth",
        "Retry queue depths",
        "Publish rate",
        "Publish errors",
        "Connection status",
        "Reconnects",
        "Circuit breaker",
        "Duplicates skipped",
        "Outbox: oldest pending row",
        "Rate-limit wait",
        "Limited handlers running",
        "Copies held",
        "Broker blocking publishers",
        "Queues re-declared",
        "Abandoned handler threads",
    ):
        assert title in titles


def test_the_latency_panel_shows_p50_p95_and_p99(board):
    (panel,) = [p for p in promql.panels(board) if p["title"] == "Handler latency"]
    exprs = [t["expr"] for t in panel["targets"]]
    for q in ("0.5", "0.95", "0.99"):
        assert any(e.startswith(f"histogram_quantile({q},") for e in exprs)


def test_the_safety_panels_filter_by_queue_where_the_metric_has_that_label(board):
    exprs = {t.panel: t.expr for t in promql.targets(board)}
    for title in ("Copies held", "Queues re-declared", "Abandoned handler threads"):
        assert 'queue=~"$queue"' in exprs[title], title
        assert "by (queue" in exprs[title], title
    # a broker alarm is per connection: one series per worker
    assert "by (instance)" in exprs["Broker blocking publishers"]


def test_the_dlq_and_retry_depth_queries_follow_the_queue_naming(board):
    exprs = {t.panel: t.expr for t in promql.targets(board)}
    assert 'kind="dlq",queue=~"${queue}.dlq"' in exprs["DLQ depth"]
    assert 'kind="retry",queue=~"${queue}.retry..+"' in exprs["Retry queue depths"]


def test_provisioning_loads_the_dashboard_folder_and_a_prometheus_datasource():
    root = promql.ROOT / "grafana" / "provisioning"
    (source,) = yaml.safe_load((root / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"].startswith("http")
    (provider,) = yaml.safe_load((root / "dashboards" / "rabbitq.yml").read_text())["providers"]
    assert provider["type"] == "file"
    # deploy/docker-compose.yml mounts grafana/dashboards where the provider looks.
    compose = yaml.safe_load((promql.ROOT / "deploy" / "docker-compose.yml").read_text())
    mounts = dict(
        (m.split(":")[1], m.split(":")[0]) for m in compose["services"]["grafana"]["volumes"]
    )
    host = mounts[provider["options"]["path"]]
    assert (promql.ROOT / "deploy" / host).resolve() == promql.DASHBOARD.parent


def test_the_dashboard_file_is_formatted_json():
    text = promql.DASHBOARD.read_text()
    assert text == json.dumps(json.loads(text), indent=2) + "\n"


def test_grafana_writes_a_queue_name_into_a_regex_escaped():
    assert promql.grafana_regex_value("t.ab.q0") == r"t\\.ab\\.q0"
    expr = 'x{queue=~"${queue}.dlq",type=~"$type"}[$__rate_interval]'
    out = promql.substitute(expr, {"queue": "emails", "type": ".*"}, rate_interval="1m")
    assert out == 'x{queue=~"emails.dlq",type=~".*"}[1m]'


def test_signal_drops_only_the_threshold_comparisons():
    expr = 'max by (queue) (x{kind="main"}) > 0\n  and on (queue)\nmax(y{a!="1"}) == 0'
    assert (
        promql.signal(expr) == 'max by (queue) (x{kind="main"})\n  and on (queue)\nmax(y{a!="1"})'
    )
    assert promql.signal("rate(x[5m]) / rate(y[5m]) > 0.2") == "rate(x[5m]) / rate(y[5m])"
    assert promql.signal("histogram_quantile(0.99, z) > 10") == "histogram_quantile(0.99, z)"
