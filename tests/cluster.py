"""A RabbitMQ cluster of private nodes on loopback, for the cluster chaos scenario.

Each node is a :class:`~tests.broker_node.BrokerNode` (its own node name, AMQP port,
distribution port and data directory). They run as the ``rabbitmq`` user, so they share
its ``~/.erlang.cookie`` and can talk to each other; the second and later nodes join the
first (``stop_app``, ``join_cluster``, ``start_app``). Forming three takes ~20-30 s.

    with Cluster.started("chaos", size=3) as cluster:
        url = cluster.url                 # "amqp://...:p1/,amqp://...:p2/,amqp://...:p3/"
        leader = cluster.leader("orders") # the node that leads a quorum queue
        cluster.kill(leader)              # kill -9 of its Erlang VM
        cluster.restart(leader)           # it rejoins with its data
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from .broker_node import BrokerNode


@dataclass
class Cluster:
    """Nodes ``name-1`` ... ``name-N`` joined into one cluster."""

    nodes: list[BrokerNode]

    @property
    def url(self) -> str:
        """Every node's AMQP URL, comma-separated (what ``RABBITQ_URL`` accepts)."""
        return ",".join(node.url for node in self.nodes)

    def node_at(self, port: int) -> BrokerNode:
        """The node that listens on ``port``."""
        return next(node for node in self.nodes if node.port == port)

    def running(self) -> list[BrokerNode]:
        """The nodes whose Erlang VM is alive."""
        return [node for node in self.nodes if _alive(node)]

    def ctl(self, *args: str) -> str:
        """``rabbitmqctl`` against the first running node."""
        return self.running()[0].ctl(*args)

    def form(self) -> None:
        """Start every node (in parallel) and join the others to the first."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(lambda node: node.start_new(), self.nodes))
        seed = self.nodes[0]
        for node in self.nodes[1:]:
            try:
                _join(node, seed)
            except (TimeoutError, subprocess.SubprocessError) as exc:
                # Now and then a node dies while it joins on a loaded machine: start it
                # anew (no data to keep yet) and join once more, keeping the first error.
                first = f"{exc}\n--- log tail ---\n{node.log_tail()}"
                node.stop()
                with contextlib.suppress(subprocess.SubprocessError):
                    seed.ctl("forget_cluster_node", node.nodename)
                node.base.mkdir(parents=True, exist_ok=True)
                node.start_new()
                try:
                    _join(node, seed)
                except (TimeoutError, subprocess.SubprocessError) as again:
                    raise RuntimeError(f"{node.nodename} did not join: {first}") from again
        members = seed.ctl("cluster_status", "--formatter", "json")
        for node in self.nodes:
            if node.nodename not in members:
                raise RuntimeError(f"{node.nodename} did not join the cluster: {members}")

    def leader(self, queue: str) -> BrokerNode:
        """The node that leads quorum queue ``queue`` now."""
        out = self.ctl("list_queues", "-q", "--no-table-headers", "name", "leader")
        for line in out.splitlines():
            name, _, leader = line.strip().partition("\t")
            if name == queue and leader.strip():
                return next(n for n in self.nodes if n.nodename == leader.strip())
        raise LookupError(f"no leader known for queue {queue!r}")

    def members(self, queue: str) -> str:
        """The quorum queue's members, as rabbitmqctl lists them."""
        out = self.ctl("list_queues", "-q", "--no-table-headers", "name", "members")
        for line in out.splitlines():
            name, _, members = line.strip().partition("\t")
            if name == queue:
                return members
        return ""

    def node_of_connection(self, name: str) -> BrokerNode | None:
        """The node that a client connection called ``name`` is connected to."""
        out = self.ctl("list_connections", "-q", "--no-table-headers", "client_properties", "port")
        for line in out.splitlines():
            if f'"{name}"' in line or f'<<"{name}">>' in line:
                return self.node_at(int(line.rsplit("\t", 1)[1]))
        return None

    def kill(self, node: BrokerNode) -> float:
        """``kill -9`` of the node's Erlang VM; return the moment (unix time)."""
        pid = int((node.base / "pid").read_text().strip())
        moment = time.time()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return moment

    def restart(self, node: BrokerNode) -> None:
        """Start a killed node again: it rejoins the cluster with its data."""
        node.start()

    def heal(self) -> list[str]:
        """Start every node that is down again; return their names."""
        down = [node for node in self.nodes if not _alive(node)]
        for node in down:
            self.restart(node)
        return [node.name for node in down]

    def stop(self) -> None:
        """Stop every node and remove its files."""
        for node in reversed(self.nodes):
            node.stop()

    @classmethod
    @contextmanager
    def started(cls, name: str, size: int = 3) -> Iterator[Cluster]:
        """A formed cluster, stopped and removed on exit."""
        cluster = cls([BrokerNode(name=f"{name}-{i + 1}") for i in range(size)])
        try:
            cluster.form()
            yield cluster
        finally:
            cluster.stop()


def _join(node: BrokerNode, seed: BrokerNode) -> None:
    node.ctl("stop_app")
    node.ctl("join_cluster", seed.nodename)
    node.ctl("start_app")
    node.await_startup()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    # a zombie child of ours is dead too
    done = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    return not done.stdout.strip().startswith("Z")


def _alive(node: BrokerNode) -> bool:
    try:
        return _pid_alive(int((node.base / "pid").read_text().strip()))
    except (OSError, ValueError):
        return False
