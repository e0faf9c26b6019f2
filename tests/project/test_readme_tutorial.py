"""The README's five-minute tutorial, test included, works as written in a fresh project
(issue 12, item 4): outside this repository, so without its pyproject's
``asyncio_mode = "auto"`` or any other setting of ours."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tutorial() -> tuple[str, str]:
    """The tutorial's service (``myservice.py``) and its test, as the README shows them."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Five-minute tutorial", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    service = next(b for b in blocks if "app = App(" in b)
    test = next(b for b in blocks if "rabbitq.testing" in b)
    return service, test


def fresh_project(tmp_path: Path) -> Path:
    project = tmp_path / "myproject"
    project.mkdir()
    service, test = tutorial()
    (project / "myservice.py").write_text(service)
    (project / "test_myservice.py").write_text(test)
    return project


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_tutorials_test_passes_in_a_fresh_project_as_written(tmp_path):
    project = fresh_project(tmp_path)
    assert not any((p / "pyproject.toml").exists() for p in project.parents)

    result = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"], project)

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"\b1 passed\b", result.stdout), result.stdout
    assert "warning" not in result.stdout.lower(), result.stdout


def test_the_tutorials_code_imports_nothing_it_does_not_use(tmp_path):
    project = fresh_project(tmp_path)
    ruff = Path(sys.executable).with_name("ruff")
    result = run([str(ruff), "check", "--isolated", "--select", "F", "--no-cache", "."], project)
    assert result.returncode == 0, result.stdout
