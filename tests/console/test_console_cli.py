"""``rabbitq console`` as a real process: loopback by default, a generated token printed
once (and never logged), read-only mode, and a plain queue name as a target."""

from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

from click.testing import CliRunner

from rabbitq.cli import main

LISTENING = re.compile(r"rabbitq console on http://[^:]+:(\d+)/")


@dataclass
class Console:
    process: subprocess.Popen[str]
    port: int
    head: str  # what it printed up to its address


def _start(*args: str, env: dict[str, str] | None = None) -> Console:
    """Start a console on a free port (``--port 0``) and read the port it prints."""
    process = subprocess.Popen(
        [sys.executable, "-m", "rabbitq", "console", *args, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stdout is not None
    head = ""
    while not (found := LISTENING.search(head)):
        line = process.stdout.readline()
        if not line:
            process.wait(timeout=30)
            raise AssertionError(f"the console ended before it listened:\n{head}")
        head += line
    return Console(process, int(found[1]), head)


def _get(port: int, path: str = "/", timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                return r.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _stop(console: Console) -> str:
    """Stop it and return all it printed."""
    console.process.terminate()
    console.process.wait(timeout=30)
    assert console.process.stdout is not None
    # read(), not communicate(): the lines _start read ahead sit in this reader's buffer
    with console.process.stdout:
        return console.head + console.process.stdout.read()


def test_the_command_is_registered_with_its_options():
    result = CliRunner().invoke(main, ["console", "--help"])
    assert result.exit_code == 0
    for option in (
        "--port", "--bind", "--token", "--read-only", "--url", "--metrics", "--allowed-host"
    ):  # fmt: skip
        assert option in result.output


def test_a_generated_token_is_printed_once_and_the_console_serves_on_loopback(app, broker_url):
    env = {"RABBITQ_URL": broker_url}
    env.pop("RABBITQ_CONSOLE_TOKEN", None)
    console = _start(app.queue, env=env)
    try:
        html = _get(console.port)
        assert app.topology().dlq.name in html
        html = _get(console.port, f"/q/{app.queue}")
        assert "Dead letters in" in html
    finally:
        out = _stop(console)
    assert f"rabbitq console on http://127.0.0.1:{console.port}/" in out
    assert console.port != 0
    match = re.search(r"operator token \((tok-[0-9a-f]{8}); .*\): (\S+)", out)
    assert match, out
    assert out.count(match[2]) == 1  # printed once, in that line only
    assert ":guest@" not in out


def test_a_given_token_is_never_printed_and_read_only_says_so(app, broker_url):
    console = _start(
        app.queue,
        "--read-only",
        env={"RABBITQ_URL": broker_url, "RABBITQ_CONSOLE_TOKEN": "my-own-token-123"},
    )
    try:
        assert "read-only" in _get(console.port)
    finally:
        out = _stop(console)
    assert "my-own-token-123" not in out
    assert "read-only: actions are disabled" in out


def test_a_port_in_use_is_a_one_line_error(app, broker_url):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "rabbitq", "console", app.queue, "--port", str(port)],
            capture_output=True,
            text=True,
            env={**os.environ, "RABBITQ_URL": broker_url},
            timeout=60,
        )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"Error: cannot listen on 127.0.0.1:{port}: Address already in use;"
        " choose another with --port"
    ]


def _status(port: int, host: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/", headers={"Host": host})
        return conn.getresponse().status
    finally:
        conn.close()


def test_only_the_hosts_it_serves_are_answered(app, broker_url):
    """DNS rebinding: a page of another name pointed at 127.0.0.1 is refused."""
    console = _start(app.queue, "--allowed-host", "console.test", env={"RABBITQ_URL": broker_url})
    try:
        _get(console.port)  # up
        port = console.port
        assert _status(port, f"rebind.attacker.example:{port}") == 400
        assert _status(port, f"console.test:{port}") == 200
        assert _status(port, f"localhost:{port}") == 200
    finally:
        _stop(console)
