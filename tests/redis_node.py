"""A private Redis server for tests that stop or restart Redis (never the shared one).

    with RedisNode.started() as node:
        url = node.url                      # redis://127.0.0.1:<port>/0
        node.restart(down_for=1.0)          # without persistence: everything is lost

It runs without persistence (``--save "" --appendonly no``), like the shared one in CI,
unless ``RedisNode(persist=True)``: then with an AOF fsynced on every write
(``--appendonly yes --appendfsync always``), so that a write Redis answered survives a
kill. It listens on a free port of 127.0.0.1, its files in a temporary directory
removed on stop.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.broker_node import free_port


@dataclass
class RedisNode:
    """One private ``redis-server`` on ``port``."""

    port: int = field(default_factory=free_port)
    base: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rabbitq-redis-")))
    process: subprocess.Popen[bytes] | None = None
    persist: bool = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10) -> None:
        """Start the server and wait until it accepts connections."""
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--dir", str(self.base),
             *(["--appendonly", "yes", "--appendfsync", "always"] if self.persist
               else ["--appendonly", "no"])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)

    def kill(self) -> None:
        """Stop the server at once (SIGKILL): its memory, and so its keys, are gone."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def restart(self, down_for: float = 0.0) -> None:
        """Kill the server, stay down ``down_for`` seconds, start it again (empty unless
        it persists)."""
        self.kill()
        time.sleep(down_for)
        self.start()

    def stop(self) -> None:
        """Stop the server and remove its files."""
        self.kill()
        shutil.rmtree(self.base, ignore_errors=True)

    @classmethod
    @contextmanager
    def started(cls, *, persist: bool = False) -> Iterator[RedisNode]:
        """A started server, stopped and removed on exit."""
        node = cls(persist=persist)
        try:
            node.start()
            yield node
        finally:
            node.stop()
