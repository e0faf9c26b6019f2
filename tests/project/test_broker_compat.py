"""What RabbitMQ 4.3 refuses, nowhere in rabbitq, its tools, examples, benchmarks or test
helpers (``rabbitq._amqp.brokers``: from RabbitMQ's 4.3 release notes; no 4.3 runs here, so
this scans the code): global QoS is a channel error, a transient non-exclusive queue is
refused, ``x-queue-mode`` fails a declare, and quorum priorities need no
``x-max-priority``."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("rabbitq", "bench", "examples", "scripts", "tests", "deploy")
REFUSED_ARGUMENTS = ("x-queue-mode", "x-queue-version", "x-max-priority")
HERE = Path(__file__).resolve()


@functools.cache
def sources() -> tuple[tuple[Path, ast.AST], ...]:
    """Every file of the trees, parsed once per test process (the scans share them)."""
    return tuple(
        (path, ast.parse(path.read_text(), str(path)))
        for tree in TREES
        for path in sorted((ROOT / tree).rglob("*.py"))
        if ".venv" not in path.parts and path.resolve() != HERE
    )


@functools.cache
def _method_calls() -> dict[str, list[tuple[Path, ast.Call]]]:
    """Every ``x.name(...)`` call of the trees, by ``name``, in file order."""
    found: dict[str, list[tuple[Path, ast.Call]]] = {}
    for path, module in sources():
        for node in ast.walk(module):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                found.setdefault(node.func.attr, []).append((path, node))
    return found


def calls(name: str) -> Iterator[tuple[Path, ast.Call]]:
    yield from _method_calls().get(name, [])


def true_keyword(call: ast.Call, *names: str) -> bool:
    return any(
        k.arg in names and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in call.keywords
    )


def where(path: Path, call: ast.Call) -> str:
    return f"{path.relative_to(ROOT)}:{call.lineno}"


def test_no_code_asks_for_global_qos():
    found = [where(p, c) for name in ("set_qos", "basic_qos") for p, c in calls(name)
             if true_keyword(c, "global_", "global_qos") or len(c.args) >= 3]  # fmt: skip
    assert not found, f"basic.qos global=true is a channel error on RabbitMQ 4.3: {found}"
    assert any(True for _ in calls("set_qos"))  # the scan does see the calls


def test_every_queue_declared_is_durable_exclusive_or_passive():
    declared = [(p, c) for name in ("declare_queue", "queue_declare") for p, c in calls(name)]
    assert len(declared) > 20  # the scan does see them
    transient = [where(p, c) for p, c in declared
                 if not true_keyword(c, "durable", "exclusive", "passive")]  # fmt: skip
    assert not transient, f"RabbitMQ 4.3 refuses transient non-exclusive queues: {transient}"


def test_no_queue_argument_that_4_3_refuses_or_no_longer_needs():
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.value}"
        for path, module in sources()
        if path.name != "brokers.py"
        for node in ast.walk(module)
        if isinstance(node, ast.Constant) and node.value in REFUSED_ARGUMENTS
    ]
    assert not found, found
