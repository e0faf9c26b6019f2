"""A private RabbitMQ node for tests that must stop, restart or reconfigure a broker.

The machine's broker on 5672 is shared by every other test, so a test that restarts a
broker, cuts all its connections or needs a TLS listener starts a node of its own: same
RabbitMQ installation, its own node name, ports, data and log directories, all under a
temporary directory that :meth:`BrokerNode.stop` removes. Starting one takes ~6 s.

    with BrokerNode.started("chaos") as node:
        url = node.url                  # amqp://guest:guest@127.0.0.1:<port>/
        node.ctl("stop_app"); node.ctl("start_app"); node.await_startup()
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class BrokerNode:
    """One private RabbitMQ node: ``name@localhost`` listening on ``port`` (loopback)."""

    name: str
    port: int = field(default_factory=free_port)
    config: str = ""
    """Extra ``rabbitmq.conf`` lines (e.g. a TLS listener)."""
    advanced: str = ""
    """An ``advanced.config`` (Erlang terms), for settings ``rabbitmq.conf`` lacks."""
    plugins: tuple[str, ...] = ()
    """Plugins to enable, e.g. ``("rabbitmq_management",)`` (then on ``management_port``)."""
    management_port: int = field(default_factory=free_port)
    base: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rabbitq-node-")))

    @property
    def nodename(self) -> str:
        # The test process's pid keeps two test runs on one machine from sharing a node.
        return f"{self.name}-{os.getpid()}@localhost"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    @property
    def management_url(self) -> str:
        return f"http://127.0.0.1:{self.management_port}"

    def _environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.base / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.base / "pid"),
            **(
                {"RABBITMQ_ADVANCED_CONFIG_FILE": str(self.base / "advanced.config")}
                if self.advanced
                else {}
            ),
        }

    def start(self, timeout: float = 90) -> None:
        """Start the node detached and wait until it accepts connections."""
        for sub in ("mnesia", "log"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        listener = f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
        if "rabbitmq_management" in self.plugins:
            listener += (
                f"management.tcp.port = {self.management_port}\nmanagement.tcp.ip = 127.0.0.1\n"
            )
        (self.base / "rabbitmq.conf").write_text(listener + self.config)
        (self.base / "enabled_plugins").write_text(f"[{','.join(self.plugins)}].\n")
        if self.advanced:
            (self.base / "advanced.config").write_text(self.advanced)
        _hand_to_rabbitmq_user(self.base)
        subprocess.run(
            ["rabbitmq-server", "-detached"], env=self._environment(), check=True, timeout=60
        )
        self.await_startup(timeout)

    def start_new(self, attempts: int = 2, timeout: float = 90) -> None:
        """Start a node that has no data yet; if it does not come up, kill it, wipe it and
        try again on new ports (a port picked free can be taken before the node binds it,
        and a loaded machine now and then loses a node at boot). The error names every
        attempt and the tail of its log."""
        failures: list[str] = []
        for _ in range(attempts):
            try:
                self.start(timeout)
                return
            except (TimeoutError, subprocess.SubprocessError) as exc:
                failures.append(f"{exc}\n--- log tail ---\n{self.log_tail()}")
                _kill_from_pid_file(self.base / "pid")
                for sub in ("mnesia", "log"):
                    shutil.rmtree(self.base / sub, ignore_errors=True)
                self.port, self.management_port = free_port(), free_port()
        raise TimeoutError("\n\n".join(failures))

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the node's logs (for an error message)."""
        tails = []
        for log in sorted((self.base / "log").glob("*.log")):
            with contextlib.suppress(OSError):
                text = log.read_text(errors="replace").splitlines()[-lines:]
                tails.append(f"{log.name}:\n" + "\n".join(text))
        return "\n".join(tails) or "(no log)"

    def await_startup(self, timeout: float = 90) -> None:
        """Wait until the node (and its rabbit application) is running."""
        deadline = time.monotonic() + timeout
        while True:
            done = subprocess.run(
                ["rabbitmqctl", "-n", self.nodename, "await_startup", "--timeout", "10"],
                capture_output=True,
                text=True,
            )
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"RabbitMQ node {self.nodename} did not start: {done.stderr}")
            time.sleep(0.5)  # before -detached has registered the node, await_startup fails

    def ctl(self, *args: str, timeout: float = 60) -> str:
        """Run ``rabbitmqctl -n <node> ARGS`` and return its output."""
        done = subprocess.run(
            ["rabbitmqctl", "-n", self.nodename, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
        return done.stdout

    def restart_app(self, down_for: float = 0.0) -> None:
        """``stop_app``, stay down ``down_for`` seconds, ``start_app``, wait until up."""
        self.ctl("stop_app")
        time.sleep(down_for)
        self.ctl("start_app")
        self.await_startup()

    def stop(self) -> None:
        """Stop the node and remove its files."""
        try:
            self.ctl("stop", timeout=60)
        except (subprocess.SubprocessError, OSError):
            _kill_from_pid_file(self.base / "pid")
        shutil.rmtree(self.base, ignore_errors=True)

    @classmethod
    @contextmanager
    def started(
        cls, name: str, config: str = "", plugins: tuple[str, ...] = (), advanced: str = ""
    ) -> Iterator[BrokerNode]:
        """A started node, stopped and removed on exit."""
        node = cls(name=name, config=config, plugins=plugins, advanced=advanced)
        try:
            node.start_new()
            yield node
        finally:
            node.stop()


def _hand_to_rabbitmq_user(base: Path) -> None:
    """rabbitmq-server run as root drops to the rabbitmq user, who must own the files."""
    if os.geteuid() != 0:
        return
    try:
        user = pwd.getpwnam("rabbitmq")
    except KeyError:
        return
    os.chown(base, user.pw_uid, user.pw_gid)
    for path in base.rglob("*"):
        os.chown(path, user.pw_uid, user.pw_gid)


def _kill_from_pid_file(pid_file: Path) -> None:
    try:
        os.kill(int(pid_file.read_text().strip()), 9)
    except (OSError, ValueError):
        pass
