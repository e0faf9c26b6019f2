"""What rabbitq's code never does: deserialise with pickle or marshal, or run strings
as code. A message body is data, decoded by orjson and validated by pydantic only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rabbitq

SOURCES = sorted(Path(rabbitq.__file__).parent.glob("**/*.py"))
FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}


def test_there_are_sources_to_check():
    assert len(SOURCES) > 10


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_module_imports_pickle_or_marshal_or_calls_eval_or_exec(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in FORBIDDEN_MODULES:
                found.append(node.module)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in FORBIDDEN_CALLS:
                found.append(f"{node.func.id}() at line {node.lineno}")
    assert not found, f"{path.name}: {found}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_module_mentions_pickle_or_eval_at_all(path):
    text = path.read_text()
    for word in ("pickle", "marshal.", "eval(", "exec("):
        assert word not in text, f"{path.name} mentions {word!r}"
