"""processes: ``rabbitq worker bench.service:app --processes 2`` against ``--processes 1``
on N pre-published messages; messages per second from the first handled message (in
any process) to the last.

Needs the worker's ``--processes`` option; without it the comparison is reported as
not available.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import BenchJob, Config, bench_app, job, prefill, rate, topology, unique

ROOT = Path(__file__).resolve().parent.parent


def _rabbitq() -> list[str]:
    return [sys.executable, "-m", "rabbitq"]


def unavailable() -> str | None:
    """Why the comparison cannot run, or None."""
    try:
        out = subprocess.run(
            [*_rabbitq(), "worker", "--help"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot run 'rabbitq worker --help' ({exc})"
    if "--processes" not in out:
        return "'rabbitq worker' has no --processes option in this build"
    return None


def _read(out: Path) -> tuple[float | None, float | None, int]:
    first: float | None = None
    last: float | None = None
    count = 0
    for path in out.iterdir():
        fields = path.read_text().split()
        if len(fields) != 3:
            continue
        f, la, c = float(fields[0]), float(fields[1]), int(fields[2])
        first = f if first is None else min(first, f)
        last = la if last is None else max(last, la)
        count += c
    return first, last, count


async def _run(cfg: Config, processes: int) -> dict[str, float]:
    queue = unique("processes")
    app = bench_app(queue)

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:  # the subprocess's twin does the work
        pass

    out = Path(tempfile.mkdtemp(prefix="rabbitq-bench-"))
    env = {**os.environ, "BENCH_QUEUE": queue, "BENCH_OUT": str(out)}
    env.pop("RABBITQ_URL", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    try:
        async with topology(cfg.url, app) as conn:
            await prefill(conn, queue, [job(i) for i in range(cfg.n)])
            proc = subprocess.Popen(
                [
                    *_rabbitq(),
                    "worker",
                    "bench.service:app",
                    "--processes",
                    str(processes),
                    "--url",
                    cfg.url,
                    "--log-level",
                    "WARNING",
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
            )
            try:
                deadline = asyncio.get_running_loop().time() + 300
                while True:
                    first, last, count = _read(out)
                    if count >= cfg.n:
                        break
                    if proc.poll() is not None:
                        raise RuntimeError(f"the worker exited with {proc.returncode}")
                    if asyncio.get_running_loop().time() > deadline:
                        raise TimeoutError(f"handled {count} of {cfg.n} in 300 s")
                    await asyncio.sleep(0.1)
            finally:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        await asyncio.to_thread(proc.wait, 60)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"msg/s": rate(cfg.n, first, last)}


async def one(cfg: Config) -> dict[str, float]:
    return await _run(cfg, 1)


async def two(cfg: Config) -> dict[str, float]:
    return await _run(cfg, 2)
