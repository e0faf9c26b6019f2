"""The smaller things a new user hit in the first hour, third round: a missing extra is
one line wherever it is met, ``--url`` on every command, and the outbox relay saying
that it stops. Each through the real ``rabbitq`` command (or ``python -c``), as a
subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.helpers import ROOT, assert_one_line_error, run_cli

PG_URL = os.environ.get("RABBITQ_TEST_PG", "postgresql://127.0.0.1:5432/test")

SERVICE = """
from rabbitq import App

app = App(queue="t.fh3.never-declared")
"""

WITH_OUTBOX = """
import os

from rabbitq import App
from rabbitq.effects import Outbox

app = App(queue="t.fh3.outbox")
Outbox(os.environ["FH3_DSN"], app=app, prefix=os.environ["FH3_PREFIX"])
"""


def blocking(tmp_path: Path, *names: str) -> dict[str, str]:
    """The environment of a Python where ``names`` cannot be imported (an extra that is
    not installed): each is a package on PYTHONPATH that raises ModuleNotFoundError."""
    blocked = tmp_path / "blocked"
    for name in names:
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n"
        )
    return {"PYTHONPATH": f"{blocked}{os.pathsep}{ROOT}"}


@pytest.fixture
def service(tmp_path: Path) -> Path:
    (tmp_path / "service.py").write_text(SERVICE)
    return tmp_path


@pytest.mark.parametrize(
    ("command", "options"),
    [("list", []), ("retry", ["--failing"]), ("discard", ["--all", "--yes"])],
)
def test_the_outbox_row_commands_without_the_postgres_extra_name_it_in_one_line(
    service, command, options
):
    env = blocking(service, "psycopg", "psycopg_pool")
    result = run_cli("outbox", command, "service:app", *options, cwd=service, env=env,
                     columns=200)  # fmt: skip
    line = assert_one_line_error(result)
    assert line == (
        f"Error: rabbitq outbox {command} needs the 'postgres' extra: "
        "pip install 'rabbitq[postgres]' (psycopg missing)"
    )


def test_importing_opentelemetry_without_the_otel_extra_names_the_extra(tmp_path):
    env = {**os.environ, **blocking(tmp_path, "opentelemetry")}
    result = subprocess.run(
        [sys.executable, "-c", "from rabbitq.tracing import OpenTelemetry"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        "ImportError: rabbitq.tracing.OpenTelemetry needs the 'otel' extra: "
        "pip install 'rabbitq[otel]' (opentelemetry missing)"
    )


def test_the_rest_of_rabbitq_tracing_imports_without_the_otel_extra(tmp_path):
    env = {**os.environ, **blocking(tmp_path, "opentelemetry")}
    code = "from rabbitq.tracing import TraceIds, Tracing; import rabbitq; print('ok')"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.stdout == "ok\n", result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["status", "service:app", "abc"], "service:app has no status store"),
        (["outbox", "list", "service:app"], "service:app has no outbox"),
        (["outbox", "retry", "service:app", "--all"], "service:app has no outbox"),
        (["outbox", "discard", "service:app", "--all", "--yes"], "service:app has no outbox"),
    ],
)
def test_status_and_the_outbox_commands_take_url_as_every_command_does(service, args, expected):
    result = run_cli(*args, "--url", "amqp://guest:guest@127.0.0.1:5672/", cwd=service,
                     columns=200)  # fmt: skip
    assert expected in assert_one_line_error(result)


@pytest.mark.services
def test_the_outbox_relay_says_that_it_stops_on_sigterm(tmp_path):
    prefix = f"t_fh3_{uuid.uuid4().hex[:8]}_"
    (tmp_path / "withoutbox.py").write_text(WITH_OUTBOX)
    env = {k: v for k, v in os.environ.items() if k != "RABBITQ_URL"}
    env.update(FH3_DSN=PG_URL, FH3_PREFIX=prefix, NO_COLOR="1", PYTHONPATH=str(ROOT))
    relay = subprocess.Popen(
        [sys.executable, "-m", "rabbitq", "outbox", "relay", "withoutbox:app"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert relay.stdout is not None
        seen = []
        for line in relay.stdout:  # until it leads (or exits: the loop ends)
            seen.append(line)
            if "is active" in line:
                break
        assert any("is active" in line for line in seen), "".join(seen)
        relay.send_signal(signal.SIGTERM)
        rest, _ = relay.communicate(timeout=60)
        assert relay.returncode == 0, rest
        assert "SIGTERM received: the outbox relay stops after the current batch" in rest
        assert "outbox relay stopped" in rest
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait()
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (prefix + "%",)
            ).fetchall():
                conn.execute(f'DROP TABLE "{name}"')



CELERY_PAGE_CHECK = """
import asyncio, re, sys
from rabbitq.testing import deliver

page = open(sys.argv[1]).read()
celery, ours = re.findall(r"```python\\n(.*?)```", page, re.S)[:2]  # the first pair
assert "send_email.delay" in celery
namespace = {}
exec(compile(ours, "coming-from-celery.md", "exec"), namespace)
message = namespace["SendEmail"](to="a@example.com", subject="hi", body="...")
print(asyncio.run(deliver(namespace["app"], message)).outcome)
"""


def test_the_coming_from_celery_page_s_service_handles_its_message():
    page = ROOT / "docs" / "coming-from-celery.md"
    # in a process of its own: the page's message type is registered for good once defined
    result = subprocess.run([sys.executable, "-c", CELERY_PAGE_CHECK, str(page)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.stdout == "ack\n", result.stderr
    text = page.read_text()
    assert "rabbitq purge" in text and "--reload" in text and "--wait-for-broker" in text
    assert "app.sync_publisher()" in text  # it exists: the page no longer says "planned"
