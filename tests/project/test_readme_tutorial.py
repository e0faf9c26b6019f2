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


def section() -> str:
    """The README's tutorial."""
    text = (ROOT / "README.md").read_text()
    return text.split("## Five-minute tutorial", 1)[1].split("\n## ", 1)[0]


def files() -> dict[str, str]:
    """Each file the tutorial writes, by name, as the README shows it."""
    blocks = re.findall(r"```python\n(.*?)```", section(), flags=re.S)
    (ini,) = re.findall(r"```ini\n(.*?)```", section(), flags=re.S)
    return {
        "myservice.py": next(b for b in blocks if "app = App(" in b),
        "publish.py": next(b for b in blocks if "app.publisher()" in b),
        "test_myservice.py": next(b for b in blocks if "rabbitq.testing" in b),
        "pytest.ini": ini,
    }


def tutorial() -> tuple[str, str]:
    """The tutorial's service (``myservice.py``) and its test, as the README shows them."""
    written = files()
    return written["myservice.py"], written["test_myservice.py"]


def fresh_project(tmp_path: Path) -> Path:
    project = tmp_path / "myproject"
    project.mkdir()
    for name, text in files().items():
        (project / name).write_text(text)
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
    assert "warning" not in result.stderr.lower(), result.stderr  # pytest-asyncio's (issue 25)


def test_every_python_snippet_of_the_tutorial_is_a_whole_file_that_compiles(tmp_path):
    project = fresh_project(tmp_path)
    for name in ("myservice.py", "publish.py", "test_myservice.py"):
        compile((project / name).read_text(), name, "exec")  # a SyntaxError fails here
    assert "python publish.py" in section()


def test_the_tutorials_code_imports_nothing_it_does_not_use(tmp_path):
    project = fresh_project(tmp_path)
    ruff = Path(sys.executable).with_name("ruff")
    result = run([str(ruff), "check", "--isolated", "--select", "F", "--no-cache", "."], project)
    assert result.returncode == 0, result.stdout
