"""The smaller things a new user hit in the first hour, second round (issue 25, item 9
and others): each through the real ``rabbitq`` command, as a subprocess."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]

SERVICE = """
from rabbitq import App, Message


class Ping(Message, type="t.fh2.ping"):
    n: int


app = App(queue="t.fh2.never-declared")


@app.handler(Ping)
async def ping(msg: Ping) -> None:
    pass
"""


@pytest.fixture
def service(tmp_path: Path) -> Path:
    (tmp_path / "service.py").write_text(SERVICE)
    return tmp_path


@pytest.mark.parametrize("args", [["version"], ["-V"], ["--version"]])
def test_every_way_of_asking_the_version_prints_the_same_line(args):
    from importlib.metadata import version

    result = run_cli(*args, columns=200)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"rabbitq {version('rabbitq')}\n"


def test_an_unknown_type_exits_2_as_a_failed_validation_does(service):
    unknown = run_cli("publish", "service:app", "t.fh2.nope", "{}", cwd=service, columns=200)
    invalid = run_cli(
        "publish", "service:app", "t.fh2.ping", '{"n": "x"}', cwd=service, columns=200
    )
    assert (unknown.returncode, invalid.returncode) == (2, 2)
    assert unknown.stderr.count("\n") == 1 and "unknown message type 't.fh2.nope'" in unknown.stderr
    assert "(this app handles: t.fh2.ping)" in unknown.stderr


def test_an_impossible_delay_exits_2(service):
    result = run_cli("publish", "service:app", "t.fh2.ping", '{"n": 1}', "--delay", "-1",
                     cwd=service, columns=200)  # fmt: skip
    assert result.returncode == 2
    assert "--delay" in result.stderr and result.stderr.count("\n") == 1


def test_a_time_the_dlq_tools_cannot_read_exits_2_before_connecting():
    result = run_cli("dlq", "list", "t.fh2.q", "--since", "yesterdayish",
                     url="amqp://guest:guest@127.0.0.1:1/", columns=200)  # fmt: skip
    assert result.returncode == 2
    assert "cannot read the time 'yesterdayish'" in result.stderr
    assert result.stderr.count("\n") == 1


def test_the_readme_documents_the_exit_codes():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Exit codes", 1)[1].split("\n## ", 1)[0]
    for code in ("`0`", "`1`", "`2`"):
        assert code in section


def test_effects_init_takes_url_as_every_command_does():
    result = run_cli("effects", "init", "--help", columns=200)
    assert result.returncode == 0
    assert "--url" in result.stdout and "Example:" in result.stdout


def test_the_relays_metrics_bind_is_explained_and_defaults_as_the_workers():
    relay = run_cli("outbox", "relay", "--help", columns=200).stdout
    worker = run_cli("worker", "--help", columns=200).stdout
    assert "Address for --metrics-port" in relay
    assert "--log-level" in relay
    assert "[default: 0.0.0.0]" in " ".join(relay.split())
    assert "[default: 0.0.0.0]" in " ".join(worker.split())


def test_worker_help_shows_an_example():
    result = run_cli("worker", "--help", columns=200)
    assert "Example:" in result.stdout
    assert "rabbitq worker myservice:app" in result.stdout


# -- a missing extra is one line that names it (item 3) -----------------------------------

WITH_OUTBOX = """
from rabbitq import App
from rabbitq.effects import Outbox

app = App(queue="t.fh2.outbox")
Outbox("postgresql://127.0.0.1/nowhere", app=app)
"""

IMPORTS_PSYCOPG = """
import psycopg

from rabbitq import App

app = App(queue="t.fh2.psycopg")
"""


@pytest.fixture
def without_postgres(tmp_path: Path) -> dict[str, str]:
    """The environment of a Python without the postgres extra: psycopg cannot import."""
    blocked = tmp_path / "blocked"
    for name in ("psycopg", "psycopg_pool"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n"
        )
    return {"PYTHONPATH": str(blocked)}


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: ")
    return line


def test_the_relay_without_the_extra_for_an_app_without_outbox_says_so_in_one_line(
    service, without_postgres
):
    line = one_error_line(run_cli("outbox", "relay", "service:app", cwd=service,
                                  env=without_postgres, columns=200))  # fmt: skip
    assert "service:app has no outbox" in line


def test_the_relay_without_the_extra_for_an_app_with_an_outbox_names_the_extra(
    tmp_path, without_postgres
):
    (tmp_path / "withoutbox.py").write_text(WITH_OUTBOX)
    for command in (["outbox", "relay"], ["effects", "init"], ["worker"]):
        line = one_error_line(run_cli(*command, "withoutbox:app", cwd=tmp_path,
                                      env=without_postgres, columns=200))  # fmt: skip
        assert "pip install 'rabbitq[postgres]'" in line, command


def test_an_app_that_imports_a_driver_an_extra_installs_is_told_which_extra(
    tmp_path, without_postgres
):
    (tmp_path / "direct.py").write_text(IMPORTS_PSYCOPG)
    line = one_error_line(run_cli("effects", "init", "direct:app", cwd=tmp_path,
                                  env=without_postgres, columns=200))  # fmt: skip
    assert "No module named 'psycopg' (pip install 'rabbitq[postgres]')" in line
