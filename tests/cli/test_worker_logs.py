"""What ``rabbitq worker`` logs, read from the real command's stderr: a failed
attempt's traceback (on the first attempt at INFO, on every attempt at DEBUG), a line
per message at DEBUG without aio-pika's lines (unless ``--log-level-libraries``), the
summary of what it handled, and the short notice without the management API."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rabbitq import App, RetryPolicy
from tests.failure_kinds import SettleTimeout
from tests.helpers import delete_app_objects, run_cli

pytestmark = pytest.mark.services

SERVICE = """
from rabbitq import App, Message, RetryPolicy


class Boom(Message, type="t.h2.boom"):
    n: int


class Fine(Message, type="t.h2.fine"):
    n: int


app = App(queue={queue!r}, exchange={exchange!r}, retry=RetryPolicy(delays=(0.2, 0.2)))


@app.handler(Boom)
async def boom(msg: Boom) -> None:
    raise RuntimeError(f"attempt fails {{msg.n}}")


@app.handler(Fine)
async def fine(msg: Fine) -> None:
    pass
"""
NO_API = "http://127.0.0.1:1"  # a management API that is not there, whatever the host has


@pytest.fixture
async def service(tmp_path: Path, uid: str, connection) -> Iterator[Path]:
    queue, exchange = f"t.{uid}.logs", f"t.{uid}.x"
    (tmp_path / "service.py").write_text(SERVICE.format(queue=queue, exchange=exchange))
    yield tmp_path
    app = App(queue=queue, exchange=exchange, retry=RetryPolicy(delays=(0.2, 0.2)))
    await delete_app_objects(connection, app)


def worker_log(directory: Path, url: str, *args: str, until: str = "dead-lettered to") -> str:
    """Run ``rabbitq worker service:app ARGS``, publish one fine and then one failing
    message once it consumes, stop it (SIGINT) once its log shows ``until``; its whole
    log. (The fine one is handled long before the failing one is dead-lettered.)"""
    log_path = directory / "worker.log"
    env = {k: v for k, v in os.environ.items() if k != "RABBITQ_URL"}
    env |= {"RABBITQ_MANAGEMENT_URL": NO_API, "NO_COLOR": "1"}
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rabbitq", "worker", "service:app", "--url", url, *args],
            cwd=directory, env=env, stdout=log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_for(log_path, "consuming", proc)
            for type_name in ("t.h2.fine", "t.h2.boom"):
                sent = run_cli("publish", "service:app", type_name, '{"n": 1}', url=url,
                               cwd=directory)  # fmt: skip
                assert sent.returncode == 0, sent.stderr
            wait_for(log_path, until, proc)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return log_path.read_text()


def wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        assert proc.poll() is None, f"the worker ended: {path.read_text()}"
        if time.monotonic() >= deadline:
            raise SettleTimeout(f"{text!r} in the log: {path.read_text()}", timeout)
        time.sleep(0.1)


def records(log: str) -> list[str]:
    """The log's records, each with its continuation lines (a traceback)."""
    out: list[str] = []
    for line in log.splitlines():
        if line[:4].isdigit() or not out:
            out.append(line)
        else:
            out[-1] += "\n" + line
    return out


def failed_attempt(log: str, attempt: int) -> str:
    (record,) = [r for r in records(log) if f"failed attempt {attempt} after " in r]
    return record


def test_at_info_the_first_failed_attempt_shows_its_traceback_and_the_summary_counts(
    service, broker_url
):
    log = worker_log(service, broker_url)
    first = failed_attempt(log, 1)
    assert "Traceback (most recent call last):" in first
    assert f'File "{service / "service.py"}", line 18, in boom' in first
    assert first.rstrip().endswith("RuntimeError: attempt fails 1")
    assert "Traceback" not in failed_attempt(log, 2)  # once per message at INFO
    (dead,) = [r for r in records(log) if "dead-lettered to" in r]
    assert "Traceback" not in dead and "(exhausted: attempt 3 failed after " in dead
    assert "handled 1, retried 2, dead-lettered 1 in the last" in log  # said as it stops
    assert " DEBUG " not in log
    (notice,) = [r for r in records(log) if "management" in r]
    message = notice.split(": ", 1)[1]
    assert message.startswith("DLQ policies not checked: no management API at") and (
        "enable rabbitmq_management" in message
    )
    assert len(message) < 120, message


def test_at_debug_every_attempt_shows_its_traceback_and_each_message_a_line(
    service, broker_url
):
    log = worker_log(service, broker_url, "--log-level", "debug")
    assert "Traceback" in failed_attempt(log, 1) and "Traceback" in failed_attempt(log, 2)
    assert "(t.h2.fine) handled at attempt 1 in" in log
    assert "aio_pika" not in log and "aiormq" not in log  # rabbitq's debug, not theirs


def test_the_libraries_debug_lines_are_one_option_away(service, broker_url):
    log = worker_log(service, broker_url, "--log-level-libraries", "debug")
    assert " DEBUG   aio_pika." in log
    assert " DEBUG   rabbitq." not in log  # rabbitq itself stays at INFO
