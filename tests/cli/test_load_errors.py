"""A ``MODULE:APP`` whose import fails: one line naming the file and line of the user's
code where it failed, and the whole traceback on ``--traceback`` or
``RABBITQ_TRACEBACK=1`` (through the real ``rabbitq worker``, as a subprocess)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import one_line_error, run_cli

NOWHERE = "amqp://guest:guest@127.0.0.1:1/"  # never reached: the import fails first

MODULES = {
    "brokenname": 'from rabbitq import App\n\napp = App(queue="t.h2")\nx = undefined_name + 1\n',
    "brokensyntax": 'from rabbitq import App\n\napp = App(queue="t.h2")\ndef broken(:\n',
    "badargs": 'from rabbitq import App\n\n\napp = App(queue="t.h2", prefetch=-3)\n',
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name, source in MODULES.items():
        (tmp_path / f"{name}.py").write_text(source)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "tasks.py").write_text("from rabbitq import App\nimport pkg.util\n")
    (tmp_path / "pkg" / "util.py").write_text("\n\ndef f():\n    return 1 / 0\n\n\nf()\n")
    return tmp_path


@pytest.mark.parametrize(
    ("module", "where", "what"),
    [
        ("brokenname", "brokenname.py:4", "NameError: name 'undefined_name' is not defined"),
        ("brokensyntax", "brokensyntax.py:4", "SyntaxError: invalid syntax"),
        # raised inside rabbitq: the user's line that called it
        ("badargs", "badargs.py:4", "ConfigurationError: prefetch must be at least 1"),
        # raised in a module the app imports: where it arose, not the import line
        ("pkg.tasks", "pkg/util.py:4", "ZeroDivisionError: division by zero"),
    ],
)
def test_an_import_that_fails_is_one_line_with_the_file_and_line(project, module, where, what):
    result = run_cli("worker", f"{module}:app", url=NOWHERE, cwd=project, columns=200)
    assert result.returncode == 1
    line = one_line_error(result.stderr)
    assert line.startswith(f"Error: importing '{module}' failed at {where}: {what}"), line
    assert "RABBITQ_TRACEBACK=1" in line


@pytest.mark.parametrize(
    ("args", "env"), [(["--traceback"], {}), ([], {"RABBITQ_TRACEBACK": "1"})], ids=["flag", "env"]
)
def test_the_whole_traceback_is_printed_on_request(project, args, env):
    result = run_cli("worker", "pkg.tasks:app", *args, url=NOWHERE, cwd=project, env=env,
                     columns=200)  # fmt: skip
    assert result.returncode == 1
    text = result.stderr
    assert text.startswith("Traceback (most recent call last):"), text
    assert f'File "{project / "pkg" / "tasks.py"}", line 2' in text
    assert f'File "{project / "pkg" / "util.py"}", line 4, in f' in text
    assert "rabbitq/cli" not in text  # the user's traceback, not rabbitq's wrapping of it
    last = text.strip().splitlines()[-1]
    assert last.startswith("Error: importing 'pkg.tasks' failed at pkg/util.py:4: "), text


def test_the_traceback_option_is_documented():
    help_text = run_cli("worker", "--help", columns=200).stdout
    assert "--traceback" in help_text and "RABBITQ_TRACEBACK" in help_text
    docs = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    assert "--traceback" in docs and "RABBITQ_TRACEBACK" in docs
