"""deploy/, checked without Docker or a cluster: promtool accepts the Prometheus config and
the alert rules and passes their unit tests; the compose file, the Kubernetes manifests
and the Dockerfile fit together and run commands the CLI has."""

from __future__ import annotations

import os
import re
import runpy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from rabbitq._worker.lifecycle import DEFAULT_GRACE_PERIOD
from rabbitq.cli import main as cli
from rabbitq.loader import load_app
from tests import promql

DEPLOY = promql.ROOT / "deploy"
K8S = DEPLOY / "k8s"
# What issue 3 asks the alert rules to cover, by the alert that does.
REQUIRED_ALERTS = {
    "DLQ receiving messages": "RabbitqDeadLetters",
    "DLQ not empty for a while": "RabbitqDeadLetterQueueNotEmpty",
    "retry ratio high": "RabbitqRetryRatioHigh",
    "backlog and no consumers": "RabbitqBacklogWithoutConsumers",
    "handler p99 high": "RabbitqHandlerSlow",
    "worker down": "RabbitqWorkerDown",
    "connection flapping": "RabbitqConnectionFlapping",
    "outbox stuck": "RabbitqOutboxStuck",
    "outbox rows refused by the broker (issue 20)": "RabbitqOutboxRowsFailing",
    # the safety signals: each one is a worker that cannot do its work as things stand
    "broker blocking publishers for over a minute": "RabbitqBrokerBlocked",
    "copies held (consuming paused) for over 5 minutes": "RabbitqCopiesHeld",
    "an operator deleted one of the app's queues": "RabbitqQueueRedeclared",
    "abandoned handler threads growing": "RabbitqHandlerThreadsAbandoned",
}


def run_promtool(*args: str, cwd: Path = DEPLOY / "prometheus") -> str:
    """Run promtool; skip (fail in CI) when it is not installed."""
    binary = promql.promtool()
    if binary is None:
        reason = "promtool is not installed (Debian/Ubuntu: apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    done = subprocess.run(
        [binary, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def k8s(kind: str) -> dict[str, Any]:
    (doc,) = [d for f in sorted(K8S.glob("*.yaml")) for d in load_all(f) if d["kind"] == kind]
    return doc


def worker_options() -> set[str]:
    """Every option name of ``rabbitq worker``."""
    return {opt for param in cli.commands["worker"].params for opt in param.opts}


def assert_runs_a_worker(argv: list[str]) -> None:
    """``argv`` (after the ``rabbitq`` entry point) is a worker command the CLI accepts, for
    an app that loads, serving metrics on 9100."""
    assert argv[0] == "worker"
    load_app(argv[1])  # raises if it does not name an App
    options = {arg.split("=")[0] for arg in argv[2:] if arg.startswith("--")}
    assert options <= worker_options(), options - worker_options()
    joined = " ".join(argv)
    assert re.search(r"--metrics-port[ =]9100\b", joined), joined


# -- Prometheus ------------------------------------------------------------------------------


def test_promtool_accepts_the_prometheus_config_and_its_rule_file():
    out = run_promtool("check", "config", "prometheus.yml")
    assert "1 rule files found" in out


def test_promtool_accepts_the_alert_rules():
    run_promtool("check", "rules", "alerts.yml")


def test_the_alert_rules_pass_their_promtool_unit_tests():
    # Among them: the DLQ alerts fire on dead letters and a DLQ left non-empty, and clear.
    out = run_promtool("test", "rules", "alerts.test.yml")
    assert "SUCCESS" in out


def test_the_alert_rules_cover_what_operators_are_paged_for():
    rules = {rule["alert"]: rule for rule in promql.alert_rules()}
    assert set(REQUIRED_ALERTS.values()) <= rules.keys()
    for rule in rules.values():
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_every_metric_and_label_the_alerts_name_is_exported_by_the_code():
    exported = promql.exported()
    for rule in promql.alert_rules():
        expr = rule["expr"]
        names = promql.metric_names(expr)
        assert names <= exported.keys(), f"{rule['alert']}: not exported {names - exported.keys()}"
        known = set().union(*(exported[n] for n in names)) if names else promql.TARGET_LABELS
        assert promql.label_names(expr) <= known, f"{rule['alert']}: unknown label in {expr!r}"


def test_the_alert_unit_tests_cover_both_dlq_alerts():
    tests = yaml.safe_load((DEPLOY / "prometheus" / "alerts.test.yml").read_text())["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    assert {"RabbitqDeadLetters", "RabbitqDeadLetterQueueNotEmpty"} <= fired
    assert "RabbitqOutboxStuck" in fired
    assert "RabbitqOutboxRowsFailing" in fired


SAFETY_ALERTS = (
    "RabbitqBrokerBlocked",
    "RabbitqCopiesHeld",
    "RabbitqQueueRedeclared",
    "RabbitqHandlerThreadsAbandoned",
)


def test_the_alert_unit_tests_show_each_safety_alert_firing_and_not_firing():
    tests = yaml.safe_load((DEPLOY / "prometheus" / "alerts.test.yml").read_text())["tests"]
    cases = [case for test in tests for case in test["alert_rule_test"]]
    for name in SAFETY_ALERTS:
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case.get("exp_alerts") for case in mine), f"{name} is never shown firing"
        assert any(not case.get("exp_alerts") for case in mine), f"{name} is never shown quiet"


def test_the_safety_alerts_wait_as_long_as_their_promise_and_say_what_to_do():
    rules = {rule["alert"]: rule for rule in promql.alert_rules()}
    assert rules["RabbitqBrokerBlocked"]["for"] == "1m"
    assert rules["RabbitqCopiesHeld"]["for"] == "5m"
    assert "doctor" in rules["RabbitqCopiesHeld"]["annotations"]["description"]
    for name in SAFETY_ALERTS:
        assert "{{ $labels." in rules[name]["annotations"]["summary"], name


def test_prometheus_scrapes_the_workers_metrics_port_and_loads_the_alerts():
    config = yaml.safe_load(promql.PROMETHEUS_CONFIG.read_text())
    assert config["rule_files"] == ["alerts.yml"]
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "rabbitq"]
    (sd,) = job["dns_sd_configs"]
    assert sd["names"] == ["worker"] and sd["port"] == 9100


# -- docker compose and the Dockerfile -----------------------------------------------------------


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    return data


def test_compose_brings_up_rabbitmq_a_worker_prometheus_and_grafana():
    services = compose()["services"]
    assert {"rabbitmq", "worker", "prometheus", "grafana"} <= services.keys()
    assert "management" in services["rabbitmq"]["image"]
    assert services["worker"]["depends_on"]["rabbitmq"]["condition"] == "service_healthy"


def test_every_file_compose_mounts_or_builds_from_is_in_the_repository():
    services = compose()["services"]
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name} mounts missing {source}"
        if build := service.get("build"):
            context = DEPLOY / build["context"]
            assert (context / build["dockerfile"]).is_file(), name
    prometheus_files = {
        v.split(":")[1].rsplit("/", 1)[1] for v in services["prometheus"]["volumes"]
    }
    assert prometheus_files == {"prometheus.yml", "alerts.yml"}


def test_the_compose_worker_runs_the_example_app_with_metrics_and_a_long_enough_stop():
    worker = compose()["services"]["worker"]
    assert_runs_a_worker(worker["command"])
    grace = worker["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) > DEFAULT_GRACE_PERIOD


def test_the_compose_producer_runs_the_producer_that_prometheus_scrapes():
    producer = compose()["services"]["producer"]
    assert producer["entrypoint"][:2] == ["python", "deploy/producer.py"]
    port = int(producer["entrypoint"][producer["entrypoint"].index("--metrics-port") + 1])
    config = yaml.safe_load(promql.PROMETHEUS_CONFIG.read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "rabbitq-producer"]
    assert job["dns_sd_configs"] == [
        {"names": ["producer"], "type": "A", "port": port, "refresh_interval": "10s"}
    ]


def test_the_producer_exports_its_publishes_and_nothing_about_consuming():
    producer = runpy.run_path(str(DEPLOY / "producer.py"), run_name="producer")
    metrics = producer["publish_metrics"]()
    names = {family.name for family in metrics.registry.collect()}
    assert names == {"rabbitq_published", "rabbitq_publish_errors", "rabbitq_info"}
    errors = metrics.registry.get_sample_value(
        "rabbitq_publish_errors_total",
        {"exchange": "examples", "type": "email.send", "error": "unroutable"},
    )
    assert errors == 0  # the series start at zero, so the first error shows in increase()


def dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()


def test_the_image_runs_as_a_non_root_user_with_a_healthz_healthcheck():
    text = dockerfile()
    users = re.findall(r"^USER\s+(\S+)", text, flags=re.M)
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    assert re.search(r"^FROM python:[\d.]+-slim", text, flags=re.M)
    (check,) = re.findall(r"^HEALTHCHECK .*?(?<!\\)$", text, flags=re.M | re.S)
    assert "/healthz" in check
    # the exec form: no shell needed in the image
    assert yaml.safe_load(check.split(" CMD ", 1)[1].strip())[0] == "python"


def test_the_image_copies_only_files_that_exist_and_runs_a_worker_the_cli_accepts():
    text = dockerfile()
    for sources in re.findall(r"^COPY (?!--from)(.+) \S+$", text, flags=re.M):
        for source in sources.split():
            assert (promql.ROOT / source).exists(), source
    (cmd,) = re.findall(r"^CMD (\[.*\])$", text, flags=re.M)
    assert_runs_a_worker(yaml.safe_load(cmd))
    assert re.search(r'^ENTRYPOINT \["rabbitq"\]$', text, flags=re.M)


# -- Kubernetes --------------------------------------------------------------------------------


def test_the_manifests_parse_and_kustomize_lists_them():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    for name in kustomization["resources"]:
        assert load_all(K8S / name), name


def test_the_deployment_probes_healthz_and_readyz_and_outlasts_the_grace_period():
    deployment = k8s("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["livenessProbe"]["httpGet"]["port"] in ports
    assert ports["metrics"] == 9100
    args = container["args"]
    assert_runs_a_worker(args)
    grace = DEFAULT_GRACE_PERIOD
    for arg in args:
        if arg.startswith("--grace-period="):
            grace = float(arg.split("=")[1])
    assert pod["terminationGracePeriodSeconds"] >= grace + 5
    assert pod["securityContext"]["runAsNonRoot"] is True
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_service_and_podmonitor_select_the_worker_pods_metrics_port():
    labels = k8s("Deployment")["spec"]["template"]["metadata"]["labels"]
    service = k8s("Service")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    monitor = k8s("PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"


def test_keda_scales_the_deployment_on_the_apps_waiting_and_running_work():
    scaled = k8s("ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] == k8s("Deployment")["metadata"]["name"]
    trigger = promql.keda_trigger()
    # not KEDA's rabbitmq trigger: QueueLength counts ready messages only (issue 41)
    assert trigger["type"] == "prometheus"
    app_spec = k8s("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"][1]
    app = load_app(app_spec)
    assert promql.KEDA_QUEUE == app.queue
    # one pod per prefetch's worth of work: a saturated fleet keeps its size
    assert float(trigger["metadata"]["threshold"]) == app.prefetch
    assert trigger["metadata"]["ignoreNullValues"] == "false"
    query = trigger["metadata"]["query"]
    assert promql.metric_names(query) == {"rabbitq_queue_messages", "rabbitq_messages_unacked"}
    exported = promql.exported()
    for name in promql.metric_names(query):
        assert promql.label_names(query) - {"kind"} <= exported[name], name
    assert 'kind="main"' in query  # not the retry queues, DLQ or blocked keys


def test_the_keda_query_selects_every_main_queue_lane_and_partition_and_nothing_else():
    """The query's queue matcher, applied to the queue names of apps with priority lanes
    and with partitions: every queue holding runnable work and none of the others."""
    from rabbitq import App

    matchers = set(re.findall(r'queue=~"([^"]+)"', promql.keda_query("emails")))
    (pattern,) = matchers
    for app in (
        App(queue="emails", url="amqp://x/"),
        App(queue="emails", url="amqp://x/", priorities=3),
        App(queue="emails", url="amqp://x/", partitions=4),
    ):
        for name, kind in app.topology().depth_specs():
            assert bool(re.fullmatch(pattern, name)) == (kind == "main"), (name, kind)
    for other in ("emailsx", "other", "emails.retry.5s", "emails.prio.1.dlq", "emails.p1.retry.1s"):
        assert not re.fullmatch(pattern, other), other


def test_the_deploy_readme_covers_compose_and_scaling_out():
    text = (DEPLOY / "README.md").read_text()
    for phrase in ("docker compose", "competing consumers", "prefetch", "quorum", "--processes"):
        assert phrase in text, phrase
    # Every file the README points at exists.
    for rel in re.findall(r"`((?:deploy|grafana)/[\w./-]+)`", text):
        assert (promql.ROOT / rel).exists(), rel
