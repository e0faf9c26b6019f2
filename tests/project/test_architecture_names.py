"""docs/architecture.md is true to the code: every dotted name it writes in backticks
(``dispatch.decode``, ``worker.settle.Settler.settle``, ``job.wrap_call``...) names a
module, class, function or attribute that exists. A table that names a function that
was renamed or removed fails here (the page's last section, the history of moves,
is exempt: it names what used to be)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import rabbitq

PACKAGE = Path(rabbitq.__file__).parent
PAGE = PACKAGE.parent / "docs" / "architecture.md"
HISTORY = "## Where modules went"
# Names of instances, as the page writes them: checked against their class.
INSTANCES = {
    "app": "rabbitq.App",
    "job": "rabbitq.Job",
    "hooks": "rabbitq.Hooks",
    "worker": "rabbitq.Worker",
    "ctx": "rabbitq.Context",
}
# Not rabbitq's code: AMQP methods, files, pytest, click's group.
FOREIGN = ("basic.", "pyproject.", "pytest.", "main.add_command")


def _modules() -> dict[str, str]:
    """Each module by its dotted name without ``rabbitq.`` and without the private
    packages' underscore (``worker.dispatch`` for ``rabbitq._worker.dispatch``)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(p.lstrip("_") for p in parts[1:])] = ".".join(parts)
    return found


MODULES = _modules()
BY_LAST: dict[str, list[str]] = {}
for short, full in MODULES.items():
    BY_LAST.setdefault(short.rpartition(".")[2], []).append(full)


def _attrs(obj: Any, names: list[str]) -> bool:
    for name in names:
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True


def _load(dotted: str) -> Any:
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def resolves(span: str) -> bool:
    """Whether ``span`` names something that exists (see the module docstring)."""
    if span.startswith(FOREIGN):
        return True
    if span.startswith("tests."):
        module, _, attr = span.rpartition(".")
        return hasattr(importlib.import_module(module), attr)
    comps = span.removeprefix("rabbitq.").split(".")
    for i in range(len(comps), 0, -1):  # the longest module prefix
        full = MODULES.get(".".join(c.lstrip("_") for c in comps[:i]))
        if full is not None and _attrs(importlib.import_module(full), comps[i:]):
            return True
    if comps[0] in INSTANCES and _attrs(_load(INSTANCES[comps[0]]), comps[1:]):
        return True
    # A module named within its package's section (``settle.Settler``, ``run.run_child``).
    for full in BY_LAST.get(comps[0].lstrip("_"), []):
        if _attrs(importlib.import_module(full), comps[1:]):
            return True
    return _attrs(rabbitq, comps)


def test_every_dotted_name_on_the_architecture_page_exists():
    text = PAGE.read_text().split(HISTORY)[0]
    spans = set(re.findall(r"`([a-z_][A-Za-z0-9_.]*\.[A-Za-z_][A-Za-z0-9_]*)(?:\(\))?`", text))
    assert len(spans) > 50  # the page still names its code
    missing = sorted(span for span in spans if not resolves(span))
    assert missing == [], f"docs/architecture.md names what does not exist: {missing}"


def test_a_stale_name_is_caught():
    assert not resolves("codec.decode")
    assert not resolves("worker.limits.check_timeouts")
    assert not resolves("dispatch.process")
    assert resolves("dispatch.decode") and resolves("worker.settle.Settler.settle")
