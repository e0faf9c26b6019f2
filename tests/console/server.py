"""A real console server (uvicorn, in a thread) for the browser tests and screenshots."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import uvicorn
from starlette.applications import Starlette

from rabbitq.cli.console import listen
from rabbitq.console import create_app
from rabbitq.console.security import Guard
from rabbitq.console.state import Config
from rabbitq.console.targets import Target

_last: list[Starlette] = []


def last_app() -> Starlette:
    """The application the latest :func:`serve` runs (to reach its state)."""
    return _last[-1]


@contextlib.contextmanager
def serve(
    targets: Sequence[Target],
    url: str,
    token: str,
    export_dir: Path,
    *,
    sample_interval: float = 0.5,
) -> Iterator[str]:
    """Run a console for ``targets`` until the block ends; yields its base URL."""
    config = Config(
        targets=targets,
        url=url,
        guard=Guard(token=token),
        export_dir=export_dir,
        sample_interval=sample_interval,
    )
    sock = listen("127.0.0.1", 0)  # bound before the server starts: no port to lose
    port = sock.getsockname()[1]
    app = create_app(config)
    _last.append(app)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the console did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
