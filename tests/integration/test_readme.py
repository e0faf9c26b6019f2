"""The two commands at the top of the README work as written, on a fresh copy of the
project: the first installs it into a new virtualenv and runs the demo to completion;
the second is the test command that CI runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    """The first two fenced bash blocks of the README, each one command."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [b.strip() for b in blocks[:2]]


def fresh_copy(dest: Path) -> Path:
    """The files git tracks (and new ones it does not ignore), without any .venv."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for rel in listed:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def test_the_readme_starts_with_a_run_command_and_a_test_command():
    run, test = readme_commands()
    assert "rabbitq demo" in run and "\n" not in run
    assert "pytest" in test and "\n" not in test


def test_ci_runs_exactly_the_readmes_test_command():
    _, test = readme_commands()
    ci_lines = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    assert test in ci_lines


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_readmes_commands_work_as_written_on_a_fresh_copy(tmp_path, broker_url):
    run, test = readme_commands()
    project = fresh_copy(tmp_path / "rabbitq")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["RABBITQ_URL"] = broker_url
    # The command as written, on this test's own names (the demo's rabbitq-demo queues
    # may be what a person is looking at right now).
    env["RABBITQ_DEMO_QUEUE"] = f"t.{uuid.uuid4().hex[:10]}.demo"
    # the interpreter running this suite, as "python3" on PATH for the copy
    env["PATH"] = f"{Path(sys.base_prefix) / 'bin'}:{env.get('PATH', '')}"

    demo = subprocess.run(
        ["bash", "-c", run], cwd=project, env=env, capture_output=True, text=True, timeout=480
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "Where to look next" in demo.stdout  # it settled and said where to look next

    # The test command itself, as written; collecting only, since running the whole
    # suite from inside the suite would recurse (CI runs it for real).
    tests = subprocess.run(
        ["bash", "-c", f"{test} --collect-only -q"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert re.search(r"\d+ tests collected", tests.stdout)

    subprocess.run(
        [str(project / ".venv/bin/rabbitq"), "demo", "--cleanup"],
        cwd=project,
        env=env,
        capture_output=True,
        timeout=120,
    )
