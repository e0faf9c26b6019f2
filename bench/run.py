"""The harness: run every comparison for a few rounds, interleaved, and print medians.

Each round runs, for every comparison, the baseline and then rabbitq, or rabbitq and
then the baseline (the order alternates from round to round), so slow drifts of a
shared machine fall on both sides alike. The table shows the median with min and max
over the rounds and the ratio of rabbitq's median to the baseline's, measured in this
same run. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import rabbitq._ops.loop

from . import batches, consume, latency, memory, processes, publish, replay_scenario, retry
from .common import DEFAULT_URL, Config, Runner, check_local


@dataclass(frozen=True)
class Metric:
    """One figure a run returns, and the target for rabbitq's ratio to the baseline."""

    key: str
    higher_is_better: bool = True
    must: float | None = None  # the ratio rabbitq has to reach (>= or <=)
    aim: float | None = None  # the ratio worth aiming for


@dataclass(frozen=True)
class Comparison:
    """A baseline and a candidate (rabbitq) measured the same way."""

    scenario: str
    name: str
    baseline: Runner
    candidate: Runner
    metrics: tuple[Metric, ...]
    # None when it can run, else why not (a missing module, a missing CLI flag).
    unavailable: Callable[[], str | None] = lambda: None
    baseline_label: str = "aio-pika"
    # The event loop rabbitq's side runs on; the baseline always runs on asyncio's.
    candidate_loop: str = "asyncio"


# The client's CPU time per message: steadier than rates on a busy machine.
CPU = Metric("cpu us/msg", higher_is_better=False)


def comparisons() -> list[Comparison]:
    msgs = "msg/s"
    return [
        Comparison(
            "consume",
            "consume",
            consume.baseline,
            consume.candidate,
            (Metric(msgs, must=1.0, aim=1.3), CPU),
        ),
        Comparison(
            "consume",
            "consume vs pika",
            consume.pika_baseline,
            consume.candidate,
            (Metric(msgs), Metric("cpu us/msg", higher_is_better=False, must=1.2)),
            unavailable=_no_pika,
            baseline_label="pika",
        ),
        Comparison(
            "consume",
            "consume, rabbitq on uvloop",
            consume.baseline,
            consume.candidate,
            (Metric(msgs), CPU),
            unavailable=_no_uvloop,
            candidate_loop="uvloop",
        ),
        Comparison(
            "publish",
            "publish (one at a time)",
            publish.baseline_sequential,
            publish.candidate_sequential,
            (Metric(msgs), CPU),
        ),
        Comparison(
            "publish",
            "publish_many",
            publish.baseline_pipelined,
            publish.candidate_many,
            (Metric(msgs, must=0.9), CPU),
        ),
        Comparison(
            "retry",
            "retry path",
            retry.baseline,
            retry.candidate,
            (Metric(msgs, must=0.8), Metric("cycle msg/s"), CPU),
        ),
        Comparison(
            "latency",
            "latency @1000/s",
            latency.baseline,
            latency.candidate,
            tuple(
                Metric(k, higher_is_better=False, must=1.5 if k == "p99 ms" else None)
                for k in ("p50 ms", "p95 ms", "p99 ms")
            ),
        ),
        Comparison(
            "memory",
            "RSS prefetch 256",
            memory.baseline(256),
            memory.candidate(256),
            (
                Metric("MiB", higher_is_better=False, must=1.5),
                Metric("growth MiB", higher_is_better=False),
            ),
        ),
        Comparison(
            "memory",
            "RSS prefetch 2048",
            memory.baseline(2048),
            memory.candidate(2048),
            (
                Metric("MiB", higher_is_better=False, must=1.5),
                Metric("growth MiB", higher_is_better=False),
            ),
        ),
        Comparison(
            "processes",
            "--processes 2 vs 1",
            processes.one,
            processes.two,
            (Metric(msgs),),
            unavailable=processes.unavailable,
            baseline_label="--processes 1",
        ),
        Comparison(
            "batches",
            "batch handler (100) vs single",
            batches.single,
            batches.batched,
            (Metric(msgs), CPU),
            baseline_label="single handler",
        ),
        Comparison(
            "replay",
            "DLQ replay",
            replay_scenario.baseline,
            replay_scenario.candidate,
            (Metric(msgs),),
            unavailable=replay_scenario.unavailable,
            baseline_label="raw move loop",
        ),
    ]


def _no_pika() -> str | None:
    try:
        import pika  # noqa: F401
    except ImportError:
        return "pika is not installed (pip install -e '.[bench]')"
    return None


def _no_uvloop() -> str | None:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "uvloop is not installed (it has no wheel for this platform)"
    return None


SCENARIOS = sorted({c.scenario for c in comparisons()})


@dataclass
class Result:
    comparison: Comparison
    baseline: list[dict[str, float]] = field(default_factory=list)
    candidate: list[dict[str, float]] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None


def _median(runs: list[dict[str, float]], key: str) -> tuple[float, float, float]:
    values = [r[key] for r in runs if key in r and not math.isnan(r[key])]
    if not values:
        return (math.nan, math.nan, math.nan)
    return (statistics.median(values), min(values), max(values))


def summary(result: Result) -> list[dict[str, object]]:
    """One row per metric: medians, min/max, ratio and target."""
    c = result.comparison
    rows: list[dict[str, object]] = []
    for m in c.metrics:
        b, c_ = _median(result.baseline, m.key), _median(result.candidate, m.key)
        ratio = c_[0] / b[0] if b[0] and not math.isnan(b[0]) else math.nan
        met: bool | None = None
        if m.must is not None and not math.isnan(ratio):
            met = ratio >= m.must if m.higher_is_better else ratio <= m.must
        rows.append(
            {
                "scenario": c.scenario,
                "comparison": c.name,
                "metric": m.key,
                "baseline": c.baseline_label,
                "baseline_median": b[0],
                "baseline_min": b[1],
                "baseline_max": b[2],
                "rabbitq_median": c_[0],
                "rabbitq_min": c_[1],
                "rabbitq_max": c_[2],
                "ratio": ratio,
                "target": _target(m),
                "met": met,
                "rounds": len(result.candidate),
                "baseline_runs": [r.get(m.key) for r in result.baseline],
                "rabbitq_runs": [r.get(m.key) for r in result.candidate],
            }
        )
    return rows


def _target(m: Metric) -> str:
    op = ">=" if m.higher_is_better else "<="
    parts = []
    if m.must is not None:
        parts.append(f"{op} {m.must:g}x")
    if m.aim is not None:
        parts.append(f"aim {m.aim:g}x")
    return ", ".join(parts)


def measure(runner: Runner, cfg: Config, loop: str) -> dict[str, float]:
    """One run of one side, on a fresh event loop of its own."""
    with asyncio.Runner(loop_factory=rabbitq._ops.loop.factory(loop)) as r:
        return r.run(runner(cfg))


def run(
    cfg: Config, selected: list[Comparison], *, verbose: bool, only_side: str | None = None
) -> list[Result]:
    results = [Result(c) for c in selected]
    for result in results:
        result.skipped = result.comparison.unavailable()
    for rnd in range(cfg.rounds):
        for result in results:
            if result.skipped or result.error:
                continue
            c = result.comparison
            sides = [
                ("baseline", c.baseline, "asyncio"),
                ("rabbitq", c.candidate, c.candidate_loop),
            ]
            if rnd % 2:
                sides.reverse()
            if only_side is not None:  # profiling one side
                sides = [s for s in sides if s[0] == only_side]
            for side, runner, loop in sides:
                if verbose:
                    print(f"round {rnd + 1}: {c.name}: {side} ...", file=sys.stderr, flush=True)
                try:
                    figures = measure(runner, cfg, loop)
                except Exception as exc:
                    result.error = f"{side}: {type(exc).__name__}: {exc}"
                    if verbose:
                        traceback.print_exc()
                    break
                (result.baseline if side == "baseline" else result.candidate).append(figures)
                if verbose:
                    shown = ", ".join(f"{k} {v:.1f}" for k, v in figures.items())
                    print(f"    {shown}", file=sys.stderr, flush=True)
    return results


def _fmt(value: object) -> str:
    if not isinstance(value, float) or math.isnan(value):
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def table(results: list[Result]) -> str:
    head = (
        "comparison",
        "metric",
        "baseline median (min-max)",
        "rabbitq median (min-max)",
        "ratio",
        "target",
    )
    lines: list[tuple[str, ...]] = [head]
    notes: list[str] = []
    for result in results:
        c = result.comparison
        if result.skipped or result.error:
            why = result.skipped or f"failed: {result.error}"
            notes.append(f"{c.name}: {'not available: ' if result.skipped else ''}{why}")
            lines.append((c.name, "-", "-", "-", "-", "skipped" if result.skipped else "error"))
            continue
        for row in summary(result):
            met = {True: " ok", False: " MISSED", None: ""}[row["met"]]  # type: ignore[index]
            lines.append(
                (
                    c.name,
                    str(row["metric"]),
                    f"{_fmt(row['baseline_median'])} ({_fmt(row['baseline_min'])}-"
                    f"{_fmt(row['baseline_max'])})",
                    f"{_fmt(row['rabbitq_median'])} ({_fmt(row['rabbitq_min'])}-"
                    f"{_fmt(row['rabbitq_max'])})",
                    f"{row['ratio']:.2f}x" if not math.isnan(row["ratio"]) else "-",  # type: ignore[arg-type]
                    f"{row['target']}{met}",
                )
            )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = []
    for i, line in enumerate(lines):
        out.append("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    out.extend(notes)
    return "\n".join(out)


def markdown(doc: dict) -> str:
    """The ``--json`` document as a Markdown table (for docs/benchmarks.md)."""
    lines = [
        "| comparison | metric | baseline median (min–max) | rabbitq median (min–max) "
        "| ratio | target |",
        "|---|---|---|---|---|---|",
    ]
    for row in doc["rows"]:
        met = {True: " ✓", False: " **missed**", None: ""}[row["met"]]
        ratio = row["ratio"]
        lines.append(
            f"| {row['comparison']} | {row['metric']} "
            f"| {_fmt(row['baseline_median'])} ({_fmt(row['baseline_min'])}–"
            f"{_fmt(row['baseline_max'])}) "
            f"| {_fmt(row['rabbitq_median'])} ({_fmt(row['rabbitq_min'])}–"
            f"{_fmt(row['rabbitq_max'])}) "
            f"| {'-' if ratio is None else f'{ratio:.2f}×'} | {row['target']}{met} |"
        )
    for name, why in {**doc["skipped"], **doc["errors"]}.items():
        lines.append(f"| {name} | – | – | – | – | {why} |")
    return "\n".join(lines)


def _finite(value: object) -> object:
    """``value`` with NaN (a figure that could not be measured) as None, for JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="rabbitq against hand-written aio-pika baselines on the local broker. "
        "Each comparison runs baseline and rabbitq interleaved for --rounds rounds and "
        "prints the median (min-max) and rabbitq's ratio to the baseline of this run.",
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("RABBITQ_URL", DEFAULT_URL),
        help="broker URL; loopback only [default: $RABBITQ_URL or %(default)s]",
    )
    parser.add_argument("--n", type=int, help="messages for consume [default 20000; --quick 2000]")
    parser.add_argument("--rounds", type=int, default=3, help="rounds [default: %(default)s]")
    parser.add_argument("--quick", action="store_true", help="a tenth of the messages")
    parser.add_argument(
        "--only",
        action="append",
        choices=SCENARIOS,
        metavar="SCENARIO",
        help=f"run only this scenario (repeatable): {', '.join(SCENARIOS)}",
    )
    parser.add_argument(
        "--side",
        choices=("baseline", "rabbitq"),
        help="run one side only (to profile it: py-spy record -- python -m bench ...)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args(argv)
    if args.n is None:
        args.n = 2000 if args.quick else 20000
    if args.n < 1 or args.rounds < 1:
        parser.error("--n and --rounds must be at least 1")
    return args


# --quick is a look, not a measurement: its "ok" and "MISSED" are not a verdict.
QUICK_NOTE = (
    "note: --quick is a look, not a measurement: a tenth of the messages, on a loaded "
    "machine mostly noise; targets are checked in full mode only (python -m bench)."
)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    cfg = Config(url=check_local(args.url), n=args.n, rounds=args.rounds, quick=args.quick)
    selected = [c for c in comparisons() if not args.only or c.scenario in args.only]
    results = run(cfg, selected, verbose=args.verbose, only_side=args.side)
    if args.json or args.markdown:
        doc = {
            "n": cfg.n,
            "rounds": cfg.rounds,
            "python": sys.version.split()[0],
            "rows": [row for r in results if not (r.skipped or r.error) for row in summary(r)],
            "skipped": {r.comparison.name: r.skipped for r in results if r.skipped},
            "errors": {r.comparison.name: r.error for r in results if r.error},
        }
        doc = _finite(doc)
        print(markdown(doc) if args.markdown else json.dumps(doc, indent=2))
    else:
        print(f"rabbitq bench: n={cfg.n}, {cfg.rounds} round(s), medians (min-max)\n")
        print(table(results))
        if cfg.quick:
            print(f"\n{QUICK_NOTE}")
    return 1 if any(r.error for r in results) else 0
