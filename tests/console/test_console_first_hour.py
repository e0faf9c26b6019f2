"""``rabbitq console`` in the first hour, second round (issue 25, item 6): a refused login
is one line at start (exit 1), a broker that is down is one line at start and on the
page (never a green box), and SIGTERM stops it with a log line and exit 0."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rabbitq.console.security import Guard
from rabbitq.console.state import Config, State
from rabbitq.console.targets import from_queue
from rabbitq.errors import BrokerUnavailable

from .test_console_cli import _get, _start, _stop


def wrong_password(broker_url: str) -> str:
    return re.sub(r"//([^:@/]+)(:[^@/]*)?@", r"//\1:not-the-password@", broker_url, count=1)


def test_a_refused_login_stops_the_console_at_start_in_one_line(broker_url):
    result = subprocess.run(
        [sys.executable, "-m", "rabbitq", "console", "t.fh.console", "--port", "0",
         "--url", wrong_password(broker_url)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: ") and "refused the login" in line
    assert "not-the-password" not in result.stdout + result.stderr
    assert "rabbitq console on" not in result.stdout


def test_a_broker_that_is_down_is_one_line_at_start_and_said_on_the_page():
    console = _start("t.fh.console", "--url", "amqp://guest:guest@127.0.0.1:1/")
    try:
        deadline = time.monotonic() + 20
        page = _get(console.port)
        while "cannot reach RabbitMQ" not in page and time.monotonic() < deadline:
            time.sleep(0.2)
            page = _get(console.port)
    finally:
        out = _stop(console)
    warned = [line for line in out.splitlines() if "cannot reach RabbitMQ" in line]
    assert len(warned) >= 1 and "tries again" in warned[0]
    assert "cannot reach RabbitMQ at amqp://guest:***@127.0.0.1:1/" in page
    assert "broker unreachable" in page
    assert 'class="dlq-box good"' not in page
    assert "BrokerUnavailable" not in page


async def test_the_page_says_a_refused_login_as_the_cli_does(broker_url, tmp_path: Path):
    state = State(
        config=Config(
            targets=[from_queue("t.fh.console")],
            url=wrong_password(broker_url),
            guard=Guard(token="t" * 20),
            export_dir=tmp_path,
        )
    )
    with pytest.raises(BrokerUnavailable):
        await state.sample_once()
    await state.stop()
    assert state.broker_error is not None
    assert "refused the login: check the user and password" in state.broker_error
    assert "not-the-password" not in state.broker_error


def test_sigterm_stops_the_console_with_a_log_line_and_exit_0(app, broker_url):
    console = _start(app.queue, "--url", broker_url)
    _get(console.port)
    out = _stop(console)  # SIGTERM
    assert console.process.returncode == 0, out
    assert "SIGTERM received: stopping the console" in out
    assert "console stopped" in out
