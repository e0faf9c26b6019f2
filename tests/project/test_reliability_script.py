"""``scripts/reliability.py`` never overwrites the committed docs/reliability.md unless
asked to (issue 12, item 10)."""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def script():
    spec = importlib.util.spec_from_file_location("reliability", ROOT / "scripts/reliability.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_by_default_it_writes_a_new_file_in_the_temporary_directory():
    out = script().parse_args([]).out
    assert out.parent == Path(tempfile.gettempdir())
    assert out.name.startswith("rabbitq-reliability-") and out.suffix == ".md"
    assert ROOT not in out.parents


def test_it_writes_where_it_is_told():
    assert script().parse_args(["--out", "x/r.md"]).out == Path("x/r.md")


def test_the_docs_say_how_to_refresh_the_committed_table():
    refresh = ".venv/bin/python scripts/reliability.py --out docs/reliability.md"
    assert refresh in (ROOT / "docs/reliability.md").read_text()
    assert script().REFRESH == refresh
