"""Every python block of the README and docs/ that is marked runnable runs as written
(first hour, third round, item 5).

A block is marked by an HTML comment on the line before its fence, which the site does
not show:

    <!-- runnable -->                 the block alone, as myservice.py
    <!-- runnable: publish.py -->     as that file, beside the page's earlier named blocks

Each marked block is written into a fresh directory outside the repository (with the
named blocks that come before it on the same page, so that ``publish.py`` can import
``myservice``) and run in a subprocess with no broker reachable: the module runs as
``__main__``, every ``App`` it defines is given to ``Worker`` (``PartitionedWorker`` for
``App(partitions=N)``, ``PriorityWorker`` for ``App(priorities=N)``) as ``rabbitq
worker`` does before it connects, which refuses an app without handlers, and every
``test_*`` function it defines is called, as pytest would. A block that needs a broker
is left unmarked: the README tutorial's publish and worker run against the broker in
tests/integration/test_readme_tutorial_live.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKED = re.compile(
    r"^<!-- runnable(?::\s*(?P<name>[\w.]+\.py))?\s*-->\n```python[^\n]*\n(?P<code>.*?)^```",
    flags=re.M | re.S,
)

# Runs one block as a user's module would run, then what `rabbitq worker` does first.
CHECK = """
import inspect, runpy, sys
from rabbitq import App, PartitionedWorker, PriorityWorker, Worker

names = runpy.run_path(sys.argv[1], run_name="__main__")
for value in list(names.values()):
    if isinstance(value, App):
        kind = PartitionedWorker if value.partitions else Worker
        (PriorityWorker if value.priorities > 1 else kind)(value)
for name, value in list(names.items()):
    if name.startswith("test_") and inspect.isfunction(value):
        value()
print("ran", sys.argv[1])
"""


def marked_blocks() -> list[tuple[Path, int, str, str]]:
    """(page, line, file name, code) of every marked block, in page order."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in MARKED.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((page, line, match["name"] or "myservice.py", match["code"]))
    return found


BLOCKS = marked_blocks()


def test_the_readme_and_the_guides_have_runnable_blocks():
    pages = {page.relative_to(ROOT).as_posix() for page, *_ in BLOCKS}
    assert {"README.md", "docs/schedules.md", "docs/ordering.md"} <= pages, pages


@pytest.mark.parametrize(
    "block", BLOCKS, ids=[f"{p.relative_to(ROOT).as_posix()}:{n}" for p, n, *_ in BLOCKS]
)
def test_a_runnable_block_runs_as_written(block, tmp_path):
    page, line, name, code = block
    assert ROOT not in tmp_path.parents
    for other, other_line, other_name, other_code in BLOCKS:  # the page's earlier files
        if other == page and other_line < line:
            (tmp_path / other_name).write_text(other_code)
    (tmp_path / name).write_text(code)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env["RABBITQ_URL"] = "amqp://guest:guest@127.0.0.1:1/"  # nothing to reach, none needed
    result = subprocess.run(
        [sys.executable, "-c", CHECK, name],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    where = f"{page.relative_to(ROOT)}:{line}"
    assert result.returncode == 0, f"{where}\n{result.stdout[-2000:]}{result.stderr[-3000:]}"
    assert f"ran {name}" in result.stdout
