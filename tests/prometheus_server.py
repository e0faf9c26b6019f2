"""A private Prometheus for the live tests (the ``prometheus`` binary, its own temp dir
and free port, scraping every second) and its HTTP API: shared by the dashboard and
alert test (tests/integration/ops/test_prometheus_live.py) and the autoscaling recipe's
(tests/integration/ops/test_autoscaling_query.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import promql

SCRAPE = "1s"
DEADLINE = 45.0  # seconds for Prometheus to say where it listens

PROMETHEUS_LISTENING = re.compile(r'msg="Listening on".*?address=\S+:(\d+)')
"""Prometheus's log line once it listens (started on port 0: the port it bound)."""


def prometheus_or_skip() -> str:
    """The prometheus binary; skip without it (fail in CI)."""
    binary = promql.prometheus()
    if binary is None:
        reason = "prometheus is not installed (Debian/Ubuntu: apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return binary


@contextlib.asynccontextmanager
async def run_prometheus(
    binary: str, tmp: Path, target: str, rules: Path | None = None
) -> AsyncIterator[str]:
    """A private Prometheus scraping ``target`` every second (evaluating ``rules``, if
    given, every second); yields its base URL."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE},
        "scrape_configs": [{"job_name": "rabbitq", "static_configs": [{"targets": [target]}]}],
    }
    if rules is not None:
        config["rule_files"] = [str(rules)]
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    log_path = tmp / "prometheus.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            # port 0: it binds a free port and logs which (info), none picked before
            "--web.listen-address=127.0.0.1:0",
            "--log.level=info",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = asyncio.get_running_loop().time() + DEADLINE
        while not (found := PROMETHEUS_LISTENING.search(log_path.read_text(errors="replace"))):
            assert proc.poll() is None and asyncio.get_running_loop().time() < deadline, (
                "Prometheus did not say where it listens: " + log_path.read_text()[-4000:]
            )
            await asyncio.sleep(0.1)
        yield f"http://127.0.0.1:{found.group(1)}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if proc.returncode not in (0, -15):
            print(log_path.read_text()[-4000:])


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:  # 400 on a bad query: the body says why
        return exc.code, json.loads(exc.read() or b"null")


class Prom:
    """Prometheus's HTTP API (blocking calls run in a thread)."""

    def __init__(self, base: str) -> None:
        self.base = base

    async def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; fails the test with Prometheus's error if it is invalid."""
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        status, body = await asyncio.to_thread(_get, url)
        assert status == 200 and body["status"] == "success", f"{expr!r}: {body}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    async def value(self, expr: str) -> float | None:
        result = await self.query(expr)
        return float(result[0]["value"][1]) if result else None

    async def alerts(self) -> list[dict[str, Any]]:
        status, body = await asyncio.to_thread(_get, f"{self.base}/api/v1/alerts")
        assert status == 200, body
        alerts: list[dict[str, Any]] = body["data"]["alerts"]
        return alerts
