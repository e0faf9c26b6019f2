"""``rabbitq worker --reload``: the worker in a child process, stopped (drained) and
started again when a Python file changes; for development, as ``uvicorn --reload``.

The files watched are the ``.py`` files under the app module's directory, or under the
directories given (``--reload-dir``). Each restart is one log line naming the changed
file. A worker that fails to start (a syntax error being typed) is logged and started
again at the next change. SIGTERM/SIGINT stop the worker (drained) and the reloader.
Needs watchfiles (the ``reload`` extra); importing this module without it raises
ImportError.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterable
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType
from typing import Any

import watchfiles

from . import logs
from .run import WorkerSpec, run
from .supervisor import EXIT_MARGIN

log = logging.getLogger("rabbitq.reload")
# watchfiles logs "1 change detected" at INFO: the reloader's own line says which file
logging.getLogger("watchfiles").setLevel(logging.WARNING)

POLL = 1000  # ms: how often the watcher looks at the worker process between changes


def app_directory(app_spec: str) -> Path:
    """The directory of the module ``MODULE:APP`` names (imported if it is not yet)."""
    module = importlib.import_module(app_spec.partition(":")[0])
    file = getattr(module, "__file__", None)
    return Path(file).resolve().parent if file else Path.cwd()


def _child(spec: WorkerSpec, told: Any) -> None:
    """The body of the worker process: one whole worker, as ``rabbitq worker`` runs it;
    what the first worker said of the configuration (``told`` set), the next do not."""
    os.setpgrp()  # a Ctrl-C in the terminal reaches the reloader only, which drains once
    logs.configure(level=spec.log_level, json=spec.log_json)
    logging.getLogger("rabbitq.worker").addFilter(logs.FirstProcessOnly(told))
    try:
        run(spec)
    except Exception as exc:  # one line, as the CLI would say it
        log.error("the worker could not run: %s (waiting for a change)", exc)
        raise SystemExit(1) from None


def _shown(paths: Iterable[str]) -> str:
    """The changed files, relative to the current directory when under it."""
    relative = {p: os.path.relpath(p) for p in paths}
    names = sorted(p if r.startswith("..") else r for p, r in relative.items())
    return names[0] + (f" (and {len(names) - 1} more)" if len(names) > 1 else "")


class Reloader:
    """Runs ``spec``'s worker in a child process, restarted when a file under ``dirs``
    changes, until SIGTERM/SIGINT."""

    def __init__(self, spec: WorkerSpec, dirs: list[Path]) -> None:
        self.spec = spec
        self.dirs = dirs
        self._ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: new code
        self._process: BaseProcess | None = None
        self._stop = threading.Event()
        self._reported_exit = False
        self._told = self._ctx.Event()  # the workers' once-per-run lines are said

    def run(self) -> int:
        """Watch and restart until a signal; 0 when the last worker drained cleanly."""
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            log.info("reloading on changes to .py files under %s", ", ".join(map(str, self.dirs)))
            self._start()
            for changes in watchfiles.watch(
                *self.dirs,
                watch_filter=watchfiles.PythonFilter(),
                stop_event=self._stop,
                rust_timeout=POLL,
                yield_on_timeout=True,
                raise_interrupt=False,
            ):
                if changes:
                    log.info("%s changed: restarting the worker", _shown(p for _, p in changes))
                    self._stop_worker()
                    self._start()
                else:
                    self._note_exit()
            return self._stop_worker()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        log.info("%s received: stopping the worker", signal.Signals(signum).name)
        self._stop.set()

    def _start(self) -> None:
        args = (self.spec, self._told)
        process = self._ctx.Process(target=_child, args=args, name="rabbitq-worker")
        process.start()
        self._process, self._reported_exit = process, False

    def _note_exit(self) -> None:
        process = self._process
        if process is not None and not process.is_alive() and not self._reported_exit:
            self._reported_exit = True
            if process.exitcode:
                log.warning(
                    "the worker exited with status %s: it starts again at the next change",
                    process.exitcode,
                )

    def _stop_worker(self) -> int:
        """SIGTERM the worker, wait for its drain (killed past the grace period and a
        margin); its exit status."""
        process, self._process = self._process, None
        if process is None or not process.is_alive():  # (a failure was logged already)
            return 0
        process.terminate()
        process.join(self.spec.grace_period + EXIT_MARGIN)
        if process.is_alive():
            log.error("the worker did not stop in time: killing it")
            process.kill()
        process.join()
        return 0 if process.exitcode == 0 else 1
