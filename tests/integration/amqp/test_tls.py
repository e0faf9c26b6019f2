"""Transport security and secrets, against a private RabbitMQ node with a TLS listener
that verifies client certificates, and a user with a distinctive password.

The test makes its own CA (trustme): a server certificate for 127.0.0.1, a client
certificate, and a second, unrelated CA to show what a wrong CA looks like."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from click.testing import CliRunner

from rabbitq import (
    App,
    BrokerUnavailable,
    ConfigurationError,
    Hooks,
    Message,
    Publisher,
    RetryPolicy,
    Worker,
)
from rabbitq.cli import main
from rabbitq.settings import TLS
from tests.broker_node import BrokerNode, free_port
from tests.helpers import Recorder, running, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.slow]

PASSWORD = "Qv7-tls-s3cr3t-9Kp"  # distinctive: it must appear in no output at all
USER = "rq-secret"
MODULE = "rq_tls_app"

APP_SOURCE = """
    from rabbitq import App, Message, RetryPolicy

    class Note(Message, type="test.tls.note"):
        text: str

    app = App(queue="tls-notes", exchange="tls-x", retry=RetryPolicy(delays=(0.1,)))

    @app.handler(Note)
    async def note(msg):
        if msg.text == "fail":
            raise RuntimeError("failing on purpose")
"""


class Note(Message, type="test.tls.note.inproc"):
    text: str


@dataclass
class TlsBroker:
    node: BrokerNode
    tls_port: int
    files: dict[str, str]

    def url(self, user: str = "guest", password: str = "guest", tls: bool = True) -> str:
        port = self.tls_port if tls else self.node.port
        return f"{'amqps' if tls else 'amqp'}://{user}:{password}@127.0.0.1:{port}/"

    @property
    def tls(self) -> TLS:
        return TLS(ca=self.files["ca"], cert=self.files["cert"], key=self.files["key"])


@pytest.fixture(scope="module")
def broker() -> Iterator[TlsBroker]:
    base = Path(tempfile.mkdtemp(prefix="rabbitq-tls-"))
    certs = base / "tls"
    certs.mkdir()
    ca, other_ca = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("rabbitq-client")
    files = {
        "ca": certs / "ca.pem",
        "server": certs / "server.pem",
        "server_key": certs / "server.key",
        "cert": certs / "client.pem",
        "key": certs / "client.key",
        "other_ca": certs / "other-ca.pem",
    }
    ca.cert_pem.write_to_path(files["ca"])
    server.cert_chain_pems[0].write_to_path(files["server"])
    server.private_key_pem.write_to_path(files["server_key"])
    client.cert_chain_pems[0].write_to_path(files["cert"])
    client.private_key_pem.write_to_path(files["key"])
    other_ca.cert_pem.write_to_path(files["other_ca"])
    tls_port = free_port()
    config = textwrap.dedent(f"""
        listeners.ssl.default = 127.0.0.1:{tls_port}
        ssl_options.cacertfile = {files["ca"]}
        ssl_options.certfile = {files["server"]}
        ssl_options.keyfile = {files["server_key"]}
        ssl_options.verify = verify_peer
        ssl_options.fail_if_no_peer_cert = true
    """)
    node = BrokerNode(name="rq-tls", config=config, base=base)  # start() hands base to rabbitmq
    try:
        node.start()
        node.ctl("add_user", USER, PASSWORD)
        node.ctl("set_permissions", USER, ".*", ".*", ".*")
        yield TlsBroker(node, tls_port, {k: str(v) for k, v in files.items()})
    finally:
        node.stop()


# -- TLS -------------------------------------------------------------------------------


async def test_a_worker_and_a_publisher_talk_over_tls_with_a_client_certificate(broker):
    app = App(queue="tls-inproc", exchange="tls-inproc-x", url=broker.url(), tls=broker.tls)
    handled: list[str] = []

    @app.handler(Note)
    async def note(msg: Note) -> None:
        handled.append(msg.text)

    async with running(Worker(app)), app.publisher() as pub:
        await pub.publish(Note(text="over tls"))
        await wait_for(lambda: handled == ["over tls"])
        connections = await asyncio.to_thread(
            broker.node.ctl, "list_connections", "client_properties", "ssl", "peer_cert_subject"
        )
    worker_line = next(line for line in connections.splitlines() if "rabbitq worker" in line)
    assert "\ttrue\t" in worker_line  # ssl
    assert "trustme" in worker_line  # the subject of the client certificate it presented


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ({"ca": "other_ca", "cert": "cert", "key": "key"}, "certificate verify failed"),
        ({"ca": "ca"}, "client certificate"),  # none given: the broker refuses
    ],
    ids=["wrong-ca", "no-client-certificate"],
)
async def test_a_failed_tls_handshake_is_one_clear_line(broker, files, says):
    tls = TLS(**{k: broker.files[v] for k, v in files.items()})
    app = App(queue="tls-bad", url=broker.url(), tls=tls)
    app.handler(Note)(lambda msg: None)
    with pytest.raises(BrokerUnavailable) as caught:
        async with app.publisher():
            pass
    message = str(caught.value)
    assert "\n" not in message
    assert says in message
    assert "RABBITQ_TLS_CA" in message and "guest:***@" in message


def test_tls_files_with_a_plain_amqp_url_are_refused_not_ignored(broker):
    app = App(queue="tls-plain", url=broker.url(tls=False), tls=broker.tls)
    app.handler(Note)(lambda msg: None)

    async def go() -> None:
        async with app.publisher():
            pass

    with pytest.raises(ConfigurationError, match="not amqps://"):
        asyncio.run(go())


def test_a_missing_tls_file_is_named():
    with pytest.raises(ConfigurationError, match="TLS CA file not found: /nowhere/ca.pem"):
        TLS(ca="/nowhere/ca.pem").context()


# -- the CLI over TLS, and secrets -----------------------------------------------------


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / f"{MODULE}.py").write_text(textwrap.dedent(APP_SOURCE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("RABBITQ_URL", "RABBITQ_TLS_CA", "RABBITQ_TLS_CERT", "RABBITQ_TLS_KEY"):
        monkeypatch.delenv(name, raising=False)
    yield tmp_path
    sys.modules.pop(MODULE, None)


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_the_cli_reads_the_tls_files_from_the_environment_and_from_options(broker, app_dir):
    env = {
        "RABBITQ_TLS_CA": broker.files["ca"],
        "RABBITQ_TLS_CERT": broker.files["cert"],
        "RABBITQ_TLS_KEY": broker.files["key"],
    }
    url = broker.url(USER, PASSWORD)
    done = cli("topology", f"{MODULE}:app", "--url", url, env=env)
    assert done.exit_code == 0, done.output
    options = ["--tls-ca", broker.files["ca"], "--tls-cert", broker.files["cert"]]
    options += ["--tls-key", broker.files["key"]]
    done = cli("stats", f"{MODULE}:app", "--url", url, "--json", *options)
    assert done.exit_code == 0, done.output
    assert '"queue":"tls-notes"' in done.output
    wrong = ["--tls-ca", broker.files["other_ca"], *options[2:]]
    done = cli("stats", "tls-notes", "--url", url, *wrong)
    assert done.exit_code == 1
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and "certificate verify failed" in lines[0]
    assert PASSWORD not in done.output
    done = cli("doctor", f"{MODULE}:app", "--url", url, "--json", *options)
    assert done.exit_code in (0, 1), done.output  # 1: a danger found, not a failure
    assert json.loads(done.output)["broker_version"].startswith("3."), done.output


@pytest.mark.parametrize("command", ["doctor", "console", "stats"])
def test_a_missing_tls_file_given_as_an_option_is_one_line(app_dir, command):
    url = "amqps://guest:guest@127.0.0.1:5671/"
    done = cli(command, f"{MODULE}:app", "--url", url, "--tls-ca", "/nowhere/ca.pem")
    assert done.exit_code == 1, done.output
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and "TLS CA file not found: /nowhere/ca.pem" in lines[0], lines


class Everything(Hooks):
    """Every argument every hook was called with (what metrics would see)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_") or name == "seen" or not hasattr(Hooks, name):
            return super().__getattribute__(name)
        return lambda *args: self.seen.append(repr((name, args)))


async def test_no_hook_argument_carries_the_password(broker):
    url = broker.url(USER, PASSWORD, tls=False)
    app = App(queue="tls-hooks", exchange="tls-hooks-x", url=url, retry=RetryPolicy(delays=()))

    @app.handler(Note)
    async def note(msg: Note) -> None:
        if msg.text == "fail":
            raise RuntimeError("failing on purpose")

    everything, rec = Everything(), Recorder()
    async with running(Worker(app, hooks=[everything, rec])):
        async with Publisher(app, url=url, hooks=everything) as pub:
            await pub.publish(Note(text="ok"))
            await pub.publish(Note(text="fail"))
        await wait_for(
            lambda: rec.count("succeeded") == 1 and rec.count("dead_lettered") == 1, timeout=30
        )
    assert everything.seen
    assert not [s for s in everything.seen if PASSWORD in s]


def test_the_password_appears_in_no_output_log_or_error(broker, app_dir):
    """Worker logs (at DEBUG, aio-pika's included), CLI output and errors, on success and
    on failure, are searched for the password."""
    good = broker.url(USER, PASSWORD)
    tls = [
        "--tls-ca",
        broker.files["ca"],
        "--tls-cert",
        broker.files["cert"],
        "--tls-key",
        broker.files["key"],
    ]
    outputs: list[str] = []
    env = {**os.environ, "PYTHONPATH": str(app_dir)}
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rabbitq",
            "worker",
            f"{MODULE}:app",
            "--url",
            good,
            "--log-level",
            "DEBUG",
            "--log-level-libraries",
            "debug",
            "--grace-period",
            "2",
            *tls,
        ],
        cwd=app_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for text in ("hello", "fail"):
            done = cli(
                "publish",
                f"{MODULE}:app",
                "test.tls.note",
                f'{{"text": "{text}"}}',
                "--url",
                good,
                *tls,
            )
            outputs.append(done.output)
            assert done.exit_code == 0, done.output
        outputs.append(cli("stats", f"{MODULE}:app", "--url", good, *tls).output)
        outputs.append(cli("topology", f"{MODULE}:app", "--url", good, *tls).output)
        # failures: a wrong password, a wrong CA, an unreachable port, a bad port
        bad = [
            broker.url(USER, PASSWORD + "x"),
            broker.url(USER, PASSWORD, tls=False).replace(str(broker.node.port), "1"),
            f"amqp://{USER}:{PASSWORD}@127.0.0.1:notaport/",
        ]
        for url in bad:
            done = cli("stats", "tls-notes", "--url", url, *tls)
            assert done.exit_code != 0
            outputs.append(done.output)
        wrong_ca = ["--tls-ca", broker.files["other_ca"], *tls[2:]]
        outputs.append(
            cli(
                "publish",
                f"{MODULE}:app",
                "test.tls.note",
                '{"text": "x"}',
                "--url",
                good,
                *wrong_ca,
            ).output
        )
        refused = cli(
            "worker", f"{MODULE}:app", "--url", broker.url(USER, "wrong-" + PASSWORD), *tls
        )
        assert refused.exit_code == 1 and "refused the login" in refused.output
        outputs.append(refused.output)
        # the worker handled "hello" and dead-lettered "fail" (after one retry)
        stats = ""
        for _ in range(100):
            stats = cli("stats", f"{MODULE}:app", "--url", good, "--json", *tls).output
            if '"queue":"tls-notes.dlq","kind":"dlq","exists":true,"messages":1' in stats:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert '"queue":"tls-notes.dlq","kind":"dlq","exists":true,"messages":1' in stats
    finally:
        worker.send_signal(signal.SIGTERM)
        log, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, log
    assert "consuming 'tls-notes'" in log and "dead-lettered" in log
    outputs.append(log)
    everything = "\n".join(outputs)
    assert PASSWORD not in everything
    assert "Qv7-tls" not in everything  # not even a part of it
