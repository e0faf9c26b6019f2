"""Run the chaos scenarios against a private RabbitMQ node and write the reliability table.

    .venv/bin/python scripts/reliability.py            # full counts, ~7 minutes
    .venv/bin/python scripts/reliability.py --quick    # the test suite's counts
    .venv/bin/python scripts/reliability.py --out docs/reliability.md   # refresh the docs
    .venv/bin/python scripts/reliability.py --loss-paths   # only issue 11's table, ~4 min
    .venv/bin/python scripts/reliability.py --broker-facts --out docs/reliability.md
                                                   # only the broker facts table (no broker)

It writes to a new file in the temporary directory unless ``--out`` says where, so that
a run (a quick one in particular) never overwrites the committed docs/reliability.md by
accident; the path is printed at the end.

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

from rabbitq._amqp.brokers import FACT_ROWS  # noqa: E402
from rabbitq._amqp.fact_rows import COLUMNS  # noqa: E402
from tests.broker_node import BrokerNode  # noqa: E402
from tests.chaos import cluster_scenarios, loss_paths, scenarios  # noqa: E402
from tests.chaos.scenarios import Result, Speed  # noqa: E402
from tests.cluster import Cluster  # noqa: E402

COMMAND = ".venv/bin/python scripts/reliability.py"
REFRESH = f"{COMMAND} --out docs/reliability.md"
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


async def run_loss_paths(node: BrokerNode, workdir: Path) -> list[Result]:
    """The loss paths of issue 11 (``tests/chaos/loss_paths.py``), classic and quorum."""
    results: list[Result] = []

    async def add(name: str, coro: object) -> None:
        print(f"  {name} ...", end="", flush=True)
        began = time.monotonic()
        result: Result = await coro  # type: ignore[misc]
        results.append(result)
        print(f" {result.tally.summary()} ({time.monotonic() - began:.0f} s)", flush=True)

    for qt in ("classic", "quorum"):
        await add(
            f"x-death naming the queue ({qt})",
            loss_paths.foreign_x_death(node, workdir, queue_type=qt, messages=100),
        )
        await add(
            f"malformed x-death ({qt})", loss_paths.malformed_x_death(node, workdir, queue_type=qt)
        )
        await add(f"same-id publishes ({qt})", loss_paths.same_id_publishes(node, queue_type=qt))
        for which in ("main", "retry", "dlq"):
            await add(
                f"{which} queue deleted ({qt})",
                loss_paths.deleted_queue(node, workdir, queue_type=qt, which=which, messages=100),
            )
        await add(f"DLQ policy ({qt})", loss_paths.dlq_policy(node, workdir, queue_type=qt))
        await add(f"30 DLQ reads ({qt})", loss_paths.dlq_reads(node, queue_type=qt))
    await add("memory alarm", loss_paths.memory_alarm(node, workdir))
    await add("hung sync handlers", loss_paths.hung_sync_handlers(node))
    return results  # fmt: skip


LOSS_BEGIN = "<!-- loss-paths:begin -->"
LOSS_END = "<!-- loss-paths:end -->"


def render_loss(results: list[Result]) -> str:
    """The loss-path table and its notes, between the markers."""
    rows = [
        LOSS_BEGIN,
        "| scenario | queue | messages | fault | lost | duplicated | dead-lettered |",
        "|---|---|---:|---|---:|---:|---|",
    ]
    for r in results:
        t = r.tally
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(t.dlq_reasons.items())) or "0"
        lost = f"{len(t.lost)}" + (f" ({len(t.pending)} stuck)" if t.pending else "")
        rows.append(f"| {r.scenario} | {r.queue_type} | {r.messages} | {r.faults} | {lost} "
                    f"| {t.duplicated} | {reasons} |")  # fmt: skip
    rows += ["", "Notes from this run:", ""]
    rows += [f"- *{r.scenario}* ({r.queue_type}): {note}" for r in results for note in r.notes]
    rows.append(LOSS_END)
    return "\n".join(rows)


def splice_loss(text: str, table: str) -> str:
    """``text`` with its loss-path table replaced by ``table``."""
    head, _, rest = text.partition(LOSS_BEGIN)
    _, _, tail = rest.partition(LOSS_END)
    return head + table + tail


BROKER_BEGIN = "<!-- broker-facts:begin -->"
BROKER_END = "<!-- broker-facts:end -->"


def render_broker_facts() -> str:
    """The broker facts table (``rabbitq._amqp.brokers.FACT_ROWS``), between the markers."""
    columns = ["fact", *COLUMNS, "verified here on 3.10.8", "RabbitMQ docs"]
    rows = [BROKER_BEGIN, f"| {' | '.join(columns)} |", "|" + "---|" * len(columns)]
    rows += [
        f"| {r.fact} | {' | '.join((*r.values, r.in_4_4))} | {r.verified} | {r.docs} |"
        for r in FACT_ROWS
    ]
    rows.append(BROKER_END)
    return "\n".join(rows)


def splice_broker_facts(text: str) -> str:
    """``text`` with its broker facts table rendered afresh."""
    head, _, rest = text.partition(BROKER_BEGIN)
    _, _, tail = rest.partition(BROKER_END)
    return head + render_broker_facts() + tail


async def run_cluster(cluster: Cluster, workdir: Path, quick: bool) -> list[Result]:
    """The 3-node cluster scenario: kill -9 of the worker's node, then of the leader."""
    results = []
    targets: tuple[cluster_scenarios.Target, ...] = ("worker's node", "queue leader")
    for target in targets:
        print(f"  cluster: kill -9 of the {target} ...", end="", flush=True)
        result = await cluster_scenarios.kill_node(
            cluster,
            workdir,
            target=target,
            messages=2000 if quick else 3000,
        )
        print(f" {result.tally.summary()} ({result.seconds:.0f} s)", flush=True)
        results.append(result)
    return results


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
        if stranded := _stranded(r):
            lost = f"{len(t.lost) - stranded} ({stranded} stuck in the broker, see below)"
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
    cluster = [
        "| node killed | messages | waiting at the kill | lost | stuck in the broker "
        "| duplicated | dead-lettered | consuming resumed after |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        if r.scenario.startswith("3-node cluster"):
            t = r.tally
            waiting = next((n.rsplit(" ", 1)[1] for n in r.notes if "waiting" in n), "?")
            reasons = ", ".join(f"{k} {v}" for k, v in sorted(t.dlq_reasons.items())) or "0"
            stranded = _stranded(r)
            cluster.append(
                f"| {r.faults} | {r.messages} | {waiting} | {len(t.lost) - stranded} "
                f"| {stranded} | {t.duplicated} | {reasons} | {_seconds(r.worst_recovery)} |"
            )
    values = {
        "cluster": "\n".join(cluster),
        "command": f"{REFRESH}{' --quick' if quick else ''}",
        "environment": (
            f"Generated {datetime.now(UTC):%Y-%m-%d} on RabbitMQ {rabbit or '?'} (one node; the "
            f"cluster rows: three nodes on loopback), "
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options; ``--out`` defaults to a new file in the temporary directory."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the test suite's small counts")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write the table (default: a new file in the temporary directory; "
        f"{REFRESH} refreshes the committed one)",
    )
    parser.add_argument(
        "--loss-paths", action="store_true", help="only the loss paths of issue 11 (~4 min)"
    )
    parser.add_argument(
        "--broker-facts", action="store_true", help="only the broker facts table (no broker)"
    )
    args = parser.parse_args(argv)
    if args.out is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        args.out = Path(tempfile.gettempdir()) / f"rabbitq-reliability-{stamp}.md"
    return args


def main() -> None:
    args = parse_args()
    if args.broker_facts:
        base = args.out if args.out.exists() else ROOT / "docs" / "reliability.md"
        args.out.write_text(splice_broker_facts(base.read_text()))
        print(f"wrote the broker facts table to {args.out}")
        return
    if args.loss_paths:
        logging.basicConfig(level=logging.CRITICAL)
        # The loss-path table is spliced into the committed page (or into --out if it
        # exists already), and written to --out.
        base = args.out if args.out.exists() else ROOT / "docs" / "reliability.md"
        with tempfile.TemporaryDirectory(prefix="rabbitq-reliability-") as tmp:
            with BrokerNode.started("rabbitq-reliability") as node:
                loss = asyncio.run(run_loss_paths(node, Path(tmp)))
        args.out.write_text(splice_loss(base.read_text(), render_loss(loss)))
        lost = sum(len(r.tally.lost) for r in loss)
        print(f"wrote the loss-path table to {args.out}: {len(loss)} scenarios, lost {lost}")
        sys.exit(1 if lost else 0)
    logging.basicConfig(level=logging.CRITICAL)  # the faults make the clients log a lot
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rabbitq-reliability-") as tmp:
        print("starting a private RabbitMQ node ...", flush=True)
        with BrokerNode.started("rabbitq-reliability") as node:
            results, speeds = asyncio.run(run_all(node, Path(tmp), args.quick))
            loss = asyncio.run(run_loss_paths(node, Path(tmp)))
        print("forming a 3-node cluster of private nodes ...", flush=True)
        with Cluster.started("rabbitq-reliability-cluster") as cluster:
            results += asyncio.run(run_cluster(cluster, Path(tmp), args.quick))
    text = render(results, speeds, quick=args.quick, took=time.monotonic() - began)
    text = splice_broker_facts(splice_loss(text, render_loss(loss)))
    results += loss
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    lost = sum(len(r.tally.lost) - _stranded(r) for r in results)
    print(f"wrote {args.out}: {len(results)} scenarios, lost {lost}")
    if lost:
        sys.exit(1)


def _stranded(r: Result) -> int:
    """Of a cluster row's missing messages, those stuck in a retry queue's dead-letter
    buffer: the broker's (docs/reliability.md), not lost by rabbitq, shown in their own
    column. The count of stuck messages is a snapshot at the end, so it can include a
    duplicate's copy in transit; only as many as are missing are the broker's."""
    if not r.scenario.startswith("3-node cluster"):
        return 0
    return min(len(r.tally.lost), cluster_scenarios.stuck_of(r))


if __name__ == "__main__":
    main()
