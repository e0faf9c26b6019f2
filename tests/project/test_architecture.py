"""The layering of rabbitq/, checked from the source (see docs/architecture.md).

Every import counts, type-only and function-level ones included: no cycle at all, not
even between packages, no private name imported from another module, the DLQ tools and
the worker independent of each other, a root that holds only what users import, no
module over 400 lines, and docs/architecture.md naming every module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import rabbitq

PACKAGE = Path(rabbitq.__file__).parent
DOCS = PACKAGE.parent / "docs" / "architecture.md"
MAX_LINES = 400
# Root modules users import that define no name of rabbitq.__all__ themselves.
PUBLIC_MODULES = {"rabbitq.testing", "rabbitq.__main__"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _imports(name: str) -> list[tuple[str, list[str]]]:
    """(imported rabbitq module, names taken from it) for every import in ``name``."""
    tree = ast.parse(MODULES[name].read_text())
    package = name if _is_package(name) else name.rpartition(".")[0]
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "rabbitq"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "rabbitq":
                continue
            plain: list[str] = []
            for alias in node.names:
                if f"{source}.{alias.name}" in MODULES:  # a submodule
                    found.append((f"{source}.{alias.name}", []))
                else:
                    plain.append(alias.name)
            if plain:
                found.append((source, plain))
    return found


GRAPH = {name: sorted({m for m, _ in _imports(name) if m in MODULES}) for name in MODULES}


def _reachable(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in GRAPH[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_walk_sees_every_module_and_their_imports():
    assert {"rabbitq", "rabbitq._worker.lifecycle", "rabbitq.dlq.reader"} <= set(MODULES)
    assert "rabbitq._worker.dispatch" in GRAPH["rabbitq._worker.lifecycle"]
    assert "rabbitq.hooks" in GRAPH["rabbitq.app"]  # a type-only import counts too


def test_no_module_imports_itself_through_others():
    cycles = sorted(name for name in MODULES if name in _reachable(name))
    assert cycles == [], "import cycles through: " + ", ".join(cycles)


def test_no_private_name_is_imported_from_another_module():
    private = [
        f"{name} imports {source}.{n}"
        for name in MODULES
        for source, names in _imports(name)
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert private == []


def test_the_dlq_tools_import_nothing_from_the_worker():
    for name in MODULES:
        if name.startswith(("rabbitq.dlq", "rabbitq.cli.dlq")):
            worker = sorted(m for m in _reachable(name) if m.startswith("rabbitq._worker"))
            assert worker == [], f"{name} reaches {worker}"


def test_the_worker_imports_no_layer_above_it():
    above = ("rabbitq._ops", "rabbitq.cli", "rabbitq.dlq", "rabbitq.demo", "rabbitq.testing")
    for name in MODULES:
        if name.startswith("rabbitq._worker"):
            wrong = sorted(m for m in _reachable(name) if m.startswith(above))
            assert wrong == [], f"{name} reaches {wrong}"


def _root_modules() -> list[str]:
    return [name for name in MODULES if name.count(".") == 1 and not _is_package(name)]


def test_the_core_modules_import_neither_the_worker_nor_the_tools():
    # testing runs the worker's dispatch (a user's tool, at the top, like rabbitq itself)
    core = [name for name in _root_modules() if name not in PUBLIC_MODULES]
    assert "rabbitq.app" in core
    above = ("rabbitq._worker", "rabbitq._ops", "rabbitq.cli", "rabbitq.dlq", "rabbitq.demo")
    for name in core:
        wrong = sorted(m for m in _reachable(name) if m.startswith(above))
        assert wrong == [], f"{name} reaches {wrong}"


def test_the_root_holds_only_modules_users_import():
    """Machinery lives in its package; a root module defines a public name."""
    defined = {getattr(rabbitq, n).__module__ for n in rabbitq.__all__ if n != "__version__"}
    machinery = [m for m in _root_modules() if m not in defined | PUBLIC_MODULES]
    assert machinery == [], f"move into a package: {machinery}"


def _package(name: str) -> str:
    """The package a module belongs to (``worker``, ``amqp``...), or its own name at the
    root."""
    return name.split(".")[1] if name.count(".") else name


def test_no_two_packages_import_each_other():
    edges: dict[str, set[str]] = {}
    for name, targets in GRAPH.items():
        for target in targets:
            if _package(name) != _package(target):
                edges.setdefault(_package(name), set()).add(_package(target))

    def reaches(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    loops = sorted(p for p in edges if p in reaches(p))
    assert loops == [], "packages in a loop: " + ", ".join(loops)


def test_the_architecture_doc_names_every_module():
    """Each module is named in docs/architecture.md's tree, in its package's entry."""
    text = DOCS.read_text()
    tree = text.split("```")[1]  # the first code block: the tree
    entries: dict[str, str] = {}
    current = "rabbitq"
    for line in tree.splitlines():
        if m := re.match(r"^  (\w+)/", line):
            current = m.group(1)
        elif re.match(r"^  \S", line):
            current = "rabbitq"
        entries[current] = entries.get(current, "") + " " + line
    missing = []
    for name in MODULES:
        parts = name.split(".")
        if len(parts) == 1 or _is_package(name):
            continue
        package = parts[1] if len(parts) == 3 else "rabbitq"
        if not re.search(rf"\b{parts[-1]}\b", entries.get(package, "")):
            missing.append(name)
    assert missing == [], f"not in docs/architecture.md: {missing}"


def test_no_module_is_over_400_lines():
    long = {
        name: n
        for name, path in MODULES.items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
