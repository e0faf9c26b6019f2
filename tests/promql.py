"""What the dashboard and the alert rules ask Prometheus, read from the shipped files, and
what the code exports, read from :class:`rabbitq._ops.metrics.Metrics`: shared by the static
checks (tests/project/test_dashboard.py, tests/project/test_deploy.py) and the live
Prometheus test."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "grafana" / "dashboards" / "rabbitq.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
KEDA = ROOT / "deploy" / "k8s" / "keda-scaledobject.yaml"
KEDA_QUEUE = "example-emails"
"""The app queue the shipped KEDA query names (examples.email_service's)."""

# Labels Prometheus adds to every scraped series, and the histogram's bucket label.
TARGET_LABELS = frozenset({"job", "instance"})
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}

METRIC_NAME = re.compile(r"\brabbitq_[a-z0-9_]+\b")
# `name{matchers}` selectors and the label names their matchers use.
SELECTOR = re.compile(r"\b(rabbitq_[a-z0-9_]+|up)\s*\{([^}]*)\}")
MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)")
LEGEND_LABEL = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")
# A comparison with a number: what turns an alert's signal into its condition.
COMPARISON = re.compile(
    r"\s*(?:==|!=|>=|<=|>|<)\s*(?:bool\s+)?[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])"
)
# Characters Grafana escapes in a regex-formatted variable value (prometheusSpecialRegexEscape).
_GRAFANA_REGEX_SPECIAL = re.compile(r"[$^*{}\[\]'+?.()|\\]")


@dataclass(frozen=True)
class Target:
    """One query of one dashboard panel."""

    panel: str
    expr: str
    legend: str


def dashboard() -> dict[str, Any]:
    """The shipped dashboard JSON."""
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows included, rows themselves excluded."""
    out: list[dict[str, Any]] = []
    for panel in board["panels"]:
        if panel.get("type") == "row":
            out.extend(panel.get("panels", []))
        else:
            out.append(panel)
    return out


def targets(board: dict[str, Any]) -> list[Target]:
    """Every PromQL query of every panel."""
    return [
        Target(panel["title"], t["expr"], t.get("legendFormat", ""))
        for panel in panels(board)
        for t in panel.get("targets", [])
    ]


def variables(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The template variables by name."""
    return {v["name"]: v for v in board["templating"]["list"]}


def variable_query(variable: dict[str, Any]) -> str:
    """A query variable's query, e.g. ``label_values(rabbitq_prefetch, queue)``."""
    query = variable["query"]
    return str(query["query"] if isinstance(query, dict) else query)


def alert_rules() -> list[dict[str, Any]]:
    """Every rule of alerts.yml."""
    data = yaml.safe_load(ALERTS.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def keda_trigger() -> dict[str, Any]:
    """The one trigger of the shipped ScaledObject."""
    (trigger,) = yaml.safe_load(KEDA.read_text())["spec"]["triggers"]
    return dict(trigger)


def keda_query(queue: str) -> str:
    """The ScaledObject's query for the app whose queue is ``queue`` (written as the
    recipe says: in place of :data:`KEDA_QUEUE`, its dots as ``[.]``)."""
    query = str(keda_trigger()["metadata"]["query"])
    assert KEDA_QUEUE in query, query
    assert re.fullmatch(r"[\w.-]+", queue), f"no regex characters but dots in {queue!r}"
    return query.replace(KEDA_QUEUE, queue.replace(".", "[.]"))


def grafana_regex_value(value: str) -> str:
    """``value`` as Grafana writes a single-value regex variable into a Prometheus query."""
    return _GRAFANA_REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), value)


def substitute(expr: str, values: dict[str, str], *, rate_interval: str) -> str:
    """``expr`` with ``$var``/``${var}`` replaced as Grafana does; the built-in interval
    variables all become ``rate_interval``."""
    for name in ("__rate_interval", "__interval", "__range"):
        expr = expr.replace("${" + name + "}", rate_interval).replace("$" + name, rate_interval)
    for name, value in values.items():
        expr = expr.replace("${" + name + "}", value)
        expr = re.sub(r"\$" + name + r"\b", lambda _m, v=value: v, expr)
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


def signal(expr: str) -> str:
    """An alert expression without its threshold comparisons (``x > 0`` becomes ``x``):
    the series the condition is tested on."""
    return COMPARISON.sub("", expr)


def metric_names(expr: str) -> set[str]:
    """The ``rabbitq_*`` series names that ``expr`` reads."""
    return set(METRIC_NAME.findall(expr))


def label_names(expr: str) -> set[str]:
    """Label names used in matchers and in by/on/without/ignoring clauses of ``expr``."""
    names = {
        label for _, matchers in SELECTOR.findall(expr) for label in MATCHER_LABEL.findall(matchers)
    }
    for group in GROUPING.findall(expr):
        names.update(part.strip() for part in group.split(",") if part.strip())
    return names


def exported() -> dict[str, frozenset[str]]:
    """Every series name the code exports, with its label names (target labels and the
    histogram's ``le`` included), from a :class:`~rabbitq._ops.metrics.Metrics` and the
    outbox relay's :class:`~rabbitq.effects.metrics.OutboxMetrics`, on fresh registries."""
    from rabbitq._ops.metrics import Metrics
    from rabbitq.effects.metrics import OutboxMetrics

    out: dict[str, frozenset[str]] = {}
    for metrics in (Metrics(CollectorRegistry()), OutboxMetrics("t", CollectorRegistry())):
        labels_of: dict[str, frozenset[str]] = {}
        for wrapper in vars(metrics).values():
            # prometheus-client keeps a metric's label names in _labelnames (no public getter)
            if hasattr(wrapper, "_labelnames") and hasattr(wrapper, "_name"):
                labels_of[wrapper._name] = frozenset(wrapper._labelnames)
        for family in metrics.registry.collect():
            base = labels_of[family.name] | TARGET_LABELS
            for suffix in SUFFIXES[family.type]:
                out[family.name + suffix] = base | ({"le"} if suffix == "_bucket" else set())
    return out


def promtool() -> str | None:
    """The promtool binary, if installed."""
    return shutil.which("promtool")


def prometheus() -> str | None:
    """The prometheus binary, if installed."""
    return shutil.which("prometheus")
