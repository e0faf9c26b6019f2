"""Run the chaos scenarios against a private RabbitMQ node and write docs/reliability.md.

    .venv/bin/python scripts/reliability.py            # full counts, ~5 minutes
    .venv/bin/python scripts/reliability.py --quick    # the test suite's counts
    .venv/bin/python scripts/reliability.py --out /tmp/r.md

The node is started and removed by the script (``tests/broker_node.py``: the machine's
RabbitMQ installation, its own ports and data); the shared broker is never touched.
The scenarios are the ones ``tests/chaos`` runs (``tests/chaos/scenarios.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.broker_node import BrokerNode  # noqa: E402
from tests.chaos import scenarios  # noqa: E402
from tests.chaos.scenarios import Result, Speed  # noqa: E402

COMMAND = ".venv/bin/python scripts/reliability.py"
TEMPLATE = ROOT / "scripts" / "reliability.md.in"


async def run_all(node: BrokerNode, workdir: Path, quick: bool) -> tuple[list[Result], list[Speed]]:
    """Every scenario, for classic and quorum queues where the queue type matters."""
    n = (lambda full, small: small) if quick else (lambda full, small: full)
    url = node.url
    results: list[Result] = []

    async def add(name: str, coro: object) -> None:
        print(f"  {name} ...", end="", flush=True)
        began = time.monotonic()
        result: Result = await coro  # type: ignore[misc]
        results.append(result)
        print(f" {result.tally.summary()} ({time.monotonic() - began:.0f} s)", flush=True)

    for qt in ("classic", "quorum"):
        await add(
            f"kill -9 ({qt})",
            scenarios.kill_workers(
                url, workdir, messages=n(5000, 1200), kills=n(6, 3), queue_type=qt
            ),
        )
    await add("cuts", scenarios.cut_connections(url, workdir, messages=n(2000, 600), cuts=n(4, 2)))
    await add(
        "stall then cut during retry copies",
        scenarios.cut_during_retry_copies(url, workdir, messages=n(200, 40)),
    )
    await add(
        "half-open stall",
        scenarios.stall_connection(url, workdir, messages=n(2000, 400), heartbeat=n(2, 1)),
    )
    for qt in ("classic", "quorum"):
        await add(
            f"broker restart ({qt})",
            scenarios.restart_broker(
                node, workdir, messages=n(3000, 800), down_for=n(5.0, 2.0), queue_type=qt
            ),
        )
    await add(
        "SIGTERM", scenarios.sigterm_workers(url, workdir, messages=n(3000, 800), terms=n(5, 3))
    )
    await add(
        "crash loop (quorum)",
        scenarios.crash_loop(
            url, workdir, queue_type="quorum", delivery_limit=3, others=n(100, 20), prefetch=16
        ),
    )
    await add(
        "crash loop (classic)",
        scenarios.crash_loop(
            url, workdir, queue_type="classic", max_crashes=5, others=n(100, 5), prefetch=16
        ),
    )

    speeds: list[Speed] = []
    for _ in range(n(3, 1)):
        for qt in ("classic", "quorum"):
            speed = await scenarios.throughput(url, workdir, queue_type=qt, messages=n(5000, 2000))
            print(f"  speed ({qt}): publish {speed.publish:.0f}/s, consume {speed.consume:.0f}/s")
            speeds.append(speed)
    return results, speeds  # fmt: skip


def _seconds(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.1f} s"


def render(results: list[Result], speeds: list[Speed], *, quick: bool, took: float) -> str:
    """The doc: the template with its ``{{...}}`` placeholders filled in."""
    rabbit = subprocess.run(
        ["rabbitmqctl", "version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    table = [
        "| scenario | queue | messages | faults injected | lost | duplicated "
        "| dead-lettered | recovered in |",
        "|---|---|---:|---|---:|---:|---|---:|",
    ]
    for r in results:
        t = r.tally
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(t.dlq_reasons.items())) or "0"
        lost = f"{len(t.lost)}" + (f" ({len(t.pending)} stuck in the queue)" if t.pending else "")
        table.append(
            f"| {r.scenario} | {r.queue_type} | {r.messages} | {r.faults} | {lost} "
            f"| {t.duplicated} | {reasons} | {_seconds(r.worst_recovery)} |"
        )
    notes = [f"- *{r.scenario}* ({r.queue_type}): {note}" for r in results for note in r.notes]
    unconfirmed = sum(len(r.tally.unconfirmed) for r in results)
    notes.append(f"- publishes that raised, so were never counted as published: {unconfirmed}")
    speed = ["| queue | messages | runs | publish (msg/s) | consume (msg/s) |",
             "|---|---:|---:|---:|---:|"]  # fmt: skip
    for qt in ("classic", "quorum"):
        mine = [s for s in speeds if s.queue_type == qt]
        if mine:
            pub = statistics.median(s.publish for s in mine)
            con = statistics.median(s.consume for s in mine)
            speed.append(f"| {qt} | {mine[0].messages} | {len(mine)} | {pub:.0f} | {con:.0f} |")
    values = {
        "command": f"{COMMAND}{' --quick' if quick else ''}",
        "environment": (
            f"Generated {datetime.now(UTC):%Y-%m-%d} on RabbitMQ {rabbit or '?'} (one node), "
            f"Python {platform.python_version()}, {os.cpu_count()} CPUs shared with other "
            f"work; the run took {took / 60:.1f} min."
        ),
        "table": "\n".join(table),
        "notes": "\n".join(notes),
        "speed": "\n".join(speed),
    }
    text = TEMPLATE.read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the test suite's small counts")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "reliability.md")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)  # the faults make the clients log a lot
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rabbitq-reliability-") as tmp:
        print("starting a private RabbitMQ node ...", flush=True)
        with BrokerNode.started("rabbitq-reliability") as node:
            results, speeds = asyncio.run(run_all(node, Path(tmp), args.quick))
    text = render(results, speeds, quick=args.quick, took=time.monotonic() - began)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    lost = sum(len(r.tally.lost) for r in results)
    print(f"wrote {args.out}: {len(results)} scenarios, lost {lost}")
    if lost:
        sys.exit(1)


if __name__ == "__main__":
    main()
