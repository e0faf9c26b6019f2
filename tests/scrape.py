"""Reading a worker's HTTP endpoints in tests: plain GETs and a parsed ``/metrics``."""

from __future__ import annotations

import http.client
import re
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

# (sample name, sorted label pairs) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


LISTENING = re.compile(r"listening on \S+:(\d+)\)")
"""The end of the line a worker (or supervisor) logs once it serves its endpoints:
``serving metrics on URL (and /healthz, /readyz; listening on BIND:PORT)``."""


def logged_port(log: str) -> int | None:
    """The port a worker started with ``--metrics-port 0`` says it bound, from its log
    (None until it has said): no port is picked first and bound later by someone else."""
    found = LISTENING.search(log)
    return int(found.group(1)) if found else None


def http_get(url: str, timeout: float = 10) -> tuple[int, str]:
    """GET ``url``; the status and the body as text (errors are answers, not raised)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "localhost", parts.port, timeout=timeout)
    try:
        conn.request("GET", parts.path or "/")
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def parse(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, keyed by name and labels."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def scrape(base: str) -> Samples:
    """``GET {base}/metrics``, parsed; fails unless the answer is 200."""
    status, body = http_get(f"{base}/metrics")
    assert status == 200, body
    return parse(body)


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample ``name`` with exactly ``labels``, or None if there is none."""
    return samples.get((name, tuple(sorted(labels.items()))))


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))
