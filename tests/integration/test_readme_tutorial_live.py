"""The README's tutorial runs as written in a fresh directory, against the broker
(issue 25, item 7): the worker, ``publish.py`` (publish from code), the shell's
``rabbitq publish`` and ``rabbitq stats``, then SIGTERM. The only change to what the
README shows: the app's queue and exchange get this test's own names, so that a person's
``emails`` queue on the same broker is neither fed nor touched."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import orjson
import pytest

from ..project.test_readme_tutorial import files, section

pytestmark = pytest.mark.broker

BIN = Path(sys.executable).parent


def commands() -> list[str]:
    """Every shell line of the tutorial, in order (comments dropped)."""
    blocks = re.findall(r"```bash\n(.*?)```", section(), flags=re.S)
    lines = [line.split("  #", 1)[0].strip() for b in blocks for line in b.splitlines()]
    return [line for line in lines if line]


async def sh(line: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_shell(
        line, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def project(tmp_path, uid, broker_url):
    project = tmp_path / "myproject"
    project.mkdir()
    for name, text in files().items():
        if name == "myservice.py":
            own = f'App(queue="t.{uid}.tut", exchange="t.{uid}.tut"'
            assert 'App(queue="emails"' in text
            text = text.replace('App(queue="emails"', own)
        (project / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env |= {"RABBITQ_URL": broker_url, "PATH": f"{BIN}:{env.get('PATH', '')}", "NO_COLOR": "1"}
    yield project, env
    code, _, err = await sh("rabbitq topology myservice:app --delete --force", project, env)
    assert code == 0, err


@pytest.mark.slow
async def test_the_tutorial_runs_as_written_in_a_fresh_directory(project):
    directory, env = project
    lines = commands()
    assert lines[0] == "rabbitq worker myservice:app"
    assert "python publish.py" in lines
    worker = await asyncio.create_subprocess_shell(  # exec: the signal reaches the worker
        f"exec {lines[0]}", cwd=directory, env=env, stderr=asyncio.subprocess.PIPE
    )
    assert worker.stderr is not None
    seen: list[str] = []
    try:
        while not any("consuming" in line for line in seen):
            line = (await asyncio.wait_for(worker.stderr.readline(), timeout=60)).decode()
            assert line, "".join(seen)
            seen.append(line)
        for line in lines[1:]:
            code, out, err = await sh(line, directory, env)
            assert code == 0, f"{line}\n{out}{err}"
            assert "Traceback" not in err
        # both emails (publish.py's and the shell's) are handled
        for _ in range(100):
            code, out, _ = await sh("rabbitq stats myservice:app --json", directory, env)
            rows = orjson.loads(out) if code == 0 else [{"messages": -1}]
            if code == 0 and rows[0]["messages"] == 0:
                break
            await asyncio.sleep(0.1)
        assert rows[0]["messages"] == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        _, rest = await asyncio.wait_for(worker.communicate(), timeout=60)
    assert worker.returncode == 0, "".join(seen) + rest.decode()
