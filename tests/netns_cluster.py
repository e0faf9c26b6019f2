"""A RabbitMQ cluster whose nodes sit in Linux network namespaces of their own, for the
network partition chaos test (tests/chaos/test_netns_partitions.py).

Each node runs inside its own namespace (``ip netns``), joined to the others and to the
root namespace by a veth pair on one bridge; it has its own address (``10.X.Y.11`` ..),
its own epmd, and listens on the standard ports there. The clients (workers, the
publisher, the test) stay in the root namespace and reach every node over the bridge.
Partitions are real: iptables ``DROP`` rules inside a node's namespace cut it from its
peers (Erlang distribution, epmd, Raft) and, if asked, from every client too.

The machine's ``/etc/rabbitmq/rabbitmq-env.conf`` pins distribution and epmd to
127.0.0.1, which inside a namespace is that namespace's own loopback: each node is given
an env file of its own (``RABBITMQ_CONF_ENV_FILE``) and long node names by address
(``rabbit@10.X.Y.11``), so no name resolution is involved. The nodes run as the
``rabbitmq`` user (``rabbitmq-server`` drops to it) and share its ``~/.erlang.cookie``.

    with NetnsCluster.started() as cluster:   # root, ip and iptables needed
        url = cluster.url                     # all three AMQP URLs, comma-separated
        cluster.cut(cluster.nodes[0])         # from its peers
        cluster.heal()

Everything it creates (namespaces, veths, the bridge, node processes, epmd) is removed by
:meth:`NetnsCluster.stop`, which never raises: the fixture's finalizer calls it however
the test ended. Names carry a per-process tag, so pytest-xdist workers do not collide.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .broker_node import _hand_to_rabbitmq_user

CHAIN = "RABBITQ_CHAOS"
"""The iptables chain (in each node's namespace) that holds the cut's rules."""

NODE_CONFIG = """\
listeners.tcp.default = 5672
loopback_users = none
cluster_partition_handling = pause_minority
net_ticktime = {ticktime}
log.file.level = info
"""


def unavailable() -> str:
    """Why this machine cannot run a namespaced cluster ("" if it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables", "rabbitmq-server", "rabbitmqctl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = f"rqprobe{os.getpid()}"
    made = _run(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    try:
        rules = _run(["ip", "netns", "exec", probe, "iptables", "-S"], check=False)
        if rules.returncode != 0:
            return f"iptables does not work in a namespace: {rules.stderr.strip()}"
    finally:
        _run(["ip", "netns", "del", probe], check=False)
    return ""


def _run(args: Sequence[str], *, check: bool = True, timeout: float = 60,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=env)
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, args, done.stdout, done.stderr)
    return done


@dataclass
class NetnsNode:
    """One node: namespace ``ns``, address ``ip``, files under ``base``."""

    index: int
    ns: str
    ip: str
    host_veth: str
    base: Path
    ticktime: int
    dead_letter_timeout: int | None = None
    """``dead_letter_worker_publisher_confirm_timeout`` in ms (None: the broker's 180 s)."""

    @property
    def name(self) -> str:
        return f"node-{self.index}"

    @property
    def nodename(self) -> str:
        return f"rabbit@{self.ip}"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.ip}:5672/"

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        return {
            **env,
            "RABBITMQ_CONF_ENV_FILE": str(self.base / "rabbitmq-env.conf"),
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_USE_LONGNAME": "true",
            "RABBITMQ_NODE_IP_ADDRESS": "0.0.0.0",
            "ERL_EPMD_ADDRESS": f"127.0.0.1,{self.ip}",
            "RABBITMQ_DIST_PORT": "25672",
            "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.base / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.base / "pid"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.base / "advanced.config"),
        }

    def in_ns(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *args]

    def start(self, timeout: float = 120) -> None:
        for sub in ("mnesia", "log"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        (self.base / "rabbitmq.conf").write_text(NODE_CONFIG.format(ticktime=self.ticktime))
        (self.base / "enabled_plugins").write_text("[].\n")
        timer = self.dead_letter_timeout
        (self.base / "advanced.config").write_text(
            "[].\n"
            if timer is None
            else f"[{{rabbit, [{{dead_letter_worker_publisher_confirm_timeout, {timer}}}]}}].\n"
        )
        (self.base / "rabbitmq-env.conf").write_text("# this node's own: not the machine's\n")
        _hand_to_rabbitmq_user(self.base)
        with contextlib.suppress(LookupError, OSError):  # the cluster's directory: theirs too
            shutil.chown(self.base.parent, "rabbitmq", "rabbitmq")
        _run(self.in_ns("rabbitmq-server", "-detached"), env=self._environment())
        self.await_startup(timeout)

    def ctl(self, *args: str, timeout: float = 60, check: bool = True) -> str:
        """``rabbitmqctl -n <node> ARGS``, run inside the node's namespace."""
        done = _run(
            self.in_ns("rabbitmqctl", "-n", self.nodename, *args),
            env=self._environment(),
            timeout=timeout,
            check=check,
        )
        return done.stdout

    def await_startup(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            done = _run(
                self.in_ns("rabbitmqctl", "-n", self.nodename, "await_startup", "--timeout", "10"),
                env=self._environment(),
                check=False,
                timeout=30,
            )
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.nodename} did not start: {done.stderr}\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def log_tail(self, lines: int = 30) -> str:
        tails = []
        for log in sorted((self.base / "log").glob("*.log")):
            with contextlib.suppress(OSError):
                text = log.read_text(errors="replace").splitlines()[-lines:]
                tails.append(f"{log.name}:\n" + "\n".join(text))
        return "\n".join(tails) or "(no log)"

    def kill(self) -> None:
        """``kill -9`` of every process in the node's namespace (its VM and epmd)."""
        for pid in _run(["ip", "netns", "pids", self.ns], check=False).stdout.split():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        deadline = time.monotonic() + 20
        while _run(["ip", "netns", "pids", self.ns], check=False).stdout.split():
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)

    def log_mark(self) -> dict[str, int]:
        """Where the node's logs end now (for :meth:`log_lines`)."""
        return {log.name: log.stat().st_size for log in (self.base / "log").glob("*.log")}

    def log_lines(self, *words: str, since: dict[str, int] | None = None) -> list[str]:
        """The lines of the node's logs (after ``since``) that contain any of ``words``."""
        found = []
        for log in sorted((self.base / "log").glob("*.log")):
            with contextlib.suppress(OSError), log.open("rb") as f:
                f.seek((since or {}).get(log.name, 0))
                text = f.read().decode(errors="replace").splitlines()
                found += [line for line in text if any(w in line for w in words)]
        return found

    def iptables(self, *args: str) -> None:
        _run(self.in_ns("iptables", "-w", *args))


@dataclass
class NetnsCluster:
    """Nodes ``node-1`` .. ``node-N`` in namespaces, clustered, ``pause_minority``."""

    size: int = 3
    ticktime: int = 10
    """Erlang's ``net_ticktime`` (seconds): a peer silent for 0.75-1.25 of it is down.
    10 instead of the default 60, so that a cut of 10-30 s is noticed within it."""
    dead_letter_timeout: int | None = None
    """The nodes' ``dead_letter_worker_publisher_confirm_timeout`` (ms): how long a quorum
    queue's at-least-once dead-letter process waits before it sends again what it could
    not hand on. None: RabbitMQ's default, 180 s."""
    tag: str = field(
        default_factory=lambda: hashlib.sha1(f"{os.getpid()}{time.time()}".encode()).hexdigest()[:6]
    )
    base: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rabbitq-netns-")))
    nodes: list[NetnsNode] = field(default_factory=list)
    _made_bridge: bool = False

    @property
    def bridge(self) -> str:
        return f"rqb{self.tag}"

    @property
    def host_ip(self) -> str:
        """The root namespace's address on the bridge: every client's source address."""
        return f"{self._prefix}.1"

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def node(self, name: str) -> NetnsNode:
        return next(n for n in self.nodes if n.name == name or n.nodename == name)

    def _subnet(self) -> str:
        """A 10.X.Y.0/24 no interface of the machine uses (chosen from the tag)."""
        used = _run(["ip", "-4", "-o", "addr"], check=False).stdout
        seed = int(self.tag, 16)
        for attempt in range(200):
            x, y = 200 + (seed + attempt) % 50, (seed // 50 + attempt * 7) % 250 + 1
            prefix = f"10.{x}.{y}"
            if f" {prefix}." not in used:
                return prefix
        raise RuntimeError("no free 10.X.Y.0/24 for the bridge")

    def build_network(self) -> None:
        self._prefix = self._subnet()
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        self._made_bridge = True
        _run(["ip", "addr", "add", f"{self.host_ip}/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        for i in range(1, self.size + 1):
            node = NetnsNode(
                index=i,
                ns=f"rabbitq-{self.tag}-{i}",
                ip=f"{self._prefix}.{10 + i}",
                host_veth=f"rq{self.tag}h{i}",
                base=self.base / f"node-{i}",
                ticktime=self.ticktime,
                dead_letter_timeout=self.dead_letter_timeout,
            )
            self.nodes.append(node)
            peer = f"rq{self.tag}p{i}"
            _run(["ip", "netns", "add", node.ns])
            _run(["ip", "link", "add", node.host_veth, "type", "veth", "peer", "name", peer])
            _run(["ip", "link", "set", peer, "netns", node.ns])
            _run(["ip", "link", "set", node.host_veth, "master", self.bridge])
            _run(["ip", "link", "set", node.host_veth, "up"])
            _run(node.in_ns("ip", "link", "set", "lo", "up"))
            _run(node.in_ns("ip", "link", "set", peer, "name", "eth0"))
            _run(node.in_ns("ip", "addr", "add", f"{node.ip}/24", "dev", "eth0"))
            _run(node.in_ns("ip", "link", "set", "eth0", "up"))
            node.iptables("-N", CHAIN)
            node.iptables("-I", "INPUT", "-j", CHAIN)
            node.iptables("-I", "OUTPUT", "-j", CHAIN)

    def form(self) -> None:
        """Start every node (in parallel) and join the others to the first."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(lambda node: node.start(), self.nodes))
        seed = self.nodes[0]
        for node in self.nodes[1:]:
            node.ctl("stop_app")
            node.ctl("join_cluster", seed.nodename)
            node.ctl("start_app")
            node.await_startup()
        members = self.running_members(seed)
        if sorted(members) != sorted(n.nodename for n in self.nodes):
            raise RuntimeError(f"the cluster did not form: {members}")

    def running_members(self, via: NetnsNode) -> list[str]:
        status = json.loads(via.ctl("cluster_status", "--formatter", "json"))
        return list(status.get("running_nodes", []))

    # -- partitions -------------------------------------------------------------------

    def drop_between(self, node: NetnsNode, peers: Sequence[NetnsNode]) -> None:
        """Drop every packet between ``node`` and ``peers`` (both ways, in both ends)."""
        for peer in peers:
            node.iptables("-A", CHAIN, "-s", peer.ip, "-j", "DROP")
            node.iptables("-A", CHAIN, "-d", peer.ip, "-j", "DROP")
            peer.iptables("-A", CHAIN, "-s", node.ip, "-j", "DROP")
            peer.iptables("-A", CHAIN, "-d", node.ip, "-j", "DROP")

    def cut(self, node: NetnsNode, *, clients: bool = False) -> None:
        """Cut ``node`` from its peers; ``clients``: from the root namespace too (every
        worker, publisher and the test itself)."""
        self.drop_between(node, [n for n in self.nodes if n is not node])
        if clients:
            node.iptables("-A", CHAIN, "-s", self.host_ip, "-j", "DROP")
            node.iptables("-A", CHAIN, "-d", self.host_ip, "-j", "DROP")

    def heal(self) -> None:
        """Remove every cut."""
        for node in self.nodes:
            node.iptables("-F", CHAIN)

    def others(self, *nodes: NetnsNode) -> list[NetnsNode]:
        return [n for n in self.nodes if n not in nodes]

    def await_whole(self, timeout: float = 240, nudge_after: float = 60) -> list[str]:
        """Wait until every node runs and sees all the others (after a heal: a paused
        minority restarts its app once it sees the majority again). A node still paused
        ``nudge_after`` seconds in is pinged towards its peers (Erlang's
        ``net_adm:ping``), and ``2 * nudge_after`` in it is killed and started again
        with its data (``stop_app`` hangs on it); returns what was done, for the report."""
        started = time.monotonic()
        deadline = started + timeout
        want = sorted(n.nodename for n in self.nodes)
        last, done = "", []
        while time.monotonic() < deadline:
            try:
                if all(sorted(self.running_members(n)) == want for n in self.nodes):
                    if all(not self.partitions(n) for n in self.nodes):
                        return done
                last = "partitions still listed"
            except subprocess.CalledProcessError as exc:
                last = f"{exc}: {exc.stderr.strip()[-600:]}"
            except (subprocess.SubprocessError, ValueError) as exc:
                last = str(exc)
            waited = time.monotonic() - started
            for node in self.nodes:
                if not (waited > nudge_after and self._paused(node)):
                    continue
                if not any(node.name in d and "ping" in d for d in done):
                    for peer in self.others(node):
                        node.ctl("eval", f"net_adm:ping('{peer.nodename}').", check=False)
                    done.append(f"{node.name} still paused {waited:.0f} s after the heal: pinged")
                elif waited > 2 * nudge_after and not any(node.name in d and "started" in d
                                                          for d in done):  # fmt: skip
                    # stop_app hangs on a node stuck paused: kill -9 and start it again
                    # with its data (it rejoins), as an operator would.
                    node.kill()
                    node.start()
                    done.append(f"{node.name} still paused {waited:.0f} s after the heal: "
                                "killed and started again")  # fmt: skip
            time.sleep(1)
        raise TimeoutError(f"the cluster did not heal in {timeout} s: {last}; {done}")

    def _paused(self, node: NetnsNode) -> bool:
        """Whether the node's VM runs but its rabbit app does not (pause_minority)."""
        out = node.ctl("eval", "rabbit:is_running().", check=False, timeout=30)
        return out.strip() == "false"

    def partitions(self, via: NetnsNode) -> list[object]:
        status = json.loads(via.ctl("cluster_status", "--formatter", "json", timeout=30))
        return list(status.get("partitions", {}) or [])

    # -- inspection ---------------------------------------------------------------------

    def ctl(self, *args: str, avoid: Sequence[NetnsNode] = ()) -> str:
        """``rabbitmqctl`` against the first node (not in ``avoid``) that answers."""
        errors = []
        for node in self.nodes:
            if node in avoid:
                continue
            try:
                return node.ctl(*args, timeout=30)
            except subprocess.SubprocessError as exc:
                errors.append(f"{node.name}: {exc}")
        raise RuntimeError("no node answered: " + "; ".join(errors))

    def node_of_queue_pid(self, queue: str) -> NetnsNode | None:
        """The node of a classic queue (e.g. an exclusive lease) ``queue``, if it exists."""
        out = self.ctl("list_queues", "-q", "--no-table-headers", "name", "pid")
        for line in out.splitlines():
            name, _, pid = line.strip().partition("\t")
            if name == queue:
                for node in self.nodes:
                    if f"<{node.nodename}." in pid:
                        return node
        return None

    def leader(self, queue: str) -> NetnsNode | None:
        out = self.ctl("list_queues", "-q", "--no-table-headers", "name", "leader")
        for line in out.splitlines():
            name, _, leader = line.strip().partition("\t")
            if name == queue and leader.strip():
                return self.node(leader.strip())
        return None

    # -- life ---------------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Kill every process in the namespaces (the nodes, their epmd), delete the
        namespaces (their veths and iptables rules go with them) and the bridge, and
        remove the files. Never raises; returns what it could not remove."""
        left: list[str] = []
        for node in self.nodes:
            pids = _run(["ip", "netns", "pids", node.ns], check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        for node in self.nodes:
            deadline = time.monotonic() + 10
            while _run(["ip", "netns", "pids", node.ns], check=False).stdout.split():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            if _run(["ip", "netns", "del", node.ns], check=False).returncode != 0:
                left.append(f"namespace {node.ns}")
            with contextlib.suppress(subprocess.SubprocessError):
                _run(["ip", "link", "del", node.host_veth], check=False)
        if self._made_bridge and _run(["ip", "link", "del", self.bridge], check=False).returncode:
            left.append(f"bridge {self.bridge}")
        shutil.rmtree(self.base, ignore_errors=True)
        return left

    @classmethod
    @contextmanager
    def started(
        cls, size: int = 3, ticktime: int = 10, dead_letter_timeout: int | None = None
    ) -> Iterator[NetnsCluster]:
        cluster = cls(size=size, ticktime=ticktime, dead_letter_timeout=dead_letter_timeout)
        try:
            cluster.build_network()
            cluster.form()
            yield cluster
        finally:
            cluster.stop()


def leftovers(prefix: str = "rabbitq-") -> list[str]:
    """Namespaces of this module's naming still present (for a cleanup check)."""
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]
