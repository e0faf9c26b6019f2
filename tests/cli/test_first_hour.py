"""The small things a new user hits in the ``rabbitq`` command (issue 12, items 9 and 10),
through the real command: click's runner, or a subprocess where the exit matters."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rabbitq.cli import main
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
APP = "examples.email_service:app"
DEAD_URL = "amqp://guest:guest@127.0.0.1:1/"


def help_of(*path: str) -> str:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def commands(group: click.Group = main, prefix: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


# -- item 9: publish rejects unknown fields ------------------------------------------


def test_publish_rejects_an_unknown_field_before_connecting():
    body = '{"to": "a@example.com", "sbuject": "hi", "subject": "hi", "body": "x"}'
    result = run_cli("publish", APP, "email.send", body, "--url", DEAD_URL, columns=100)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "sbuject" in lines[0] and "cannot reach" not in lines[0]


def test_publish_still_accepts_exactly_the_models_fields():
    body = '{"to": "a@example.com", "subject": "hi", "body": "x"}'
    result = run_cli("publish", APP, "email.send", body, "--url", DEAD_URL, columns=100)
    assert "cannot reach RabbitMQ" in result.stderr  # validated, then tried to connect


# -- item 10: one-line usage errors ----------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["stats", "--bogus"],
        ["worker"],
        ["dlq", "list", "q", "--limit", "many"],
        ["demo", "--count", "-1"],
        ["nosuchcommand"],
    ],
    ids=" ".join,
)
def test_a_bad_option_or_argument_is_one_line_that_says_where_help_is(args):
    result = run_cli(*args, columns=100)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and "--help" in lines[0]
    assert "Usage:" not in result.stderr


# -- item 10: --tls-* everywhere that connects ---------------------------------------


@pytest.mark.parametrize(
    "path",
    [p for p, c in commands() if any(o.name == "url" for o in c.params)],
    ids=" ".join,
)
def test_every_command_that_takes_a_url_takes_the_tls_files_too(path):
    text = help_of(*path)
    for option in ("--tls-ca", "--tls-cert", "--tls-key"):
        assert option in text, f"rabbitq {' '.join(path)} lacks {option}"


# -- item 10: top-level help and --log-level -------------------------------------------


def test_the_top_level_help_says_what_dlq_is_for():
    description = help_of().split("Commands:")[0]
    assert "rabbitq dlq" in description


def test_log_level_shows_its_default_as_one_of_its_choices():
    text = " ".join(help_of("worker").split())
    match = re.search(r"--log-level \[([^\]]+)\].*?\[default: ([^\]]+)\]", text)
    assert match, text
    choices = match[1].split("|")
    assert match[2] in choices, (choices, match[2])


# -- item 10: the README's CLI summary lists every option ------------------------------

# Options the summary covers in words, not per command (--json: every command but the
# long-running ones, one rule: docs/cli.md, "JSON output").
SHARED = {"--help", "--url", "--tls-ca", "--tls-cert", "--tls-key", "--type", "--reason",
          "--message-id", "--since", "--until", "--grep", "--json"}  # fmt: skip


def readme_cli_block() -> str:
    """The CLI summary, moved from the README to docs/tour.md with the rest of its page."""
    text = (ROOT / "docs" / "tour.md").read_text()
    section = text.split("\n## CLI\n", 1)[1]
    return re.search(r"```\n(.*?)```", section, flags=re.S)[1]


@pytest.mark.parametrize("path", [p for p, _ in commands()], ids=" ".join)
def test_the_cli_summary_beyond_the_tutorial_lists_every_option_of_every_command(path):
    command = dict(commands())[path]
    block = readme_cli_block()
    name = "rabbitq " + " ".join(path)
    # the lines of this command: those that start with its name, and their continuations
    lines, mine = [], False
    for line in block.splitlines():
        if line.startswith("rabbitq "):
            mine = line.startswith(name + " ")
        if mine:
            lines.append(line)
    lines = "\n".join(lines)
    for param in command.params:
        for opt in param.opts:
            if opt.startswith("--") and opt not in SHARED:
                assert opt in lines, f"{name}: {opt} missing from the CLI summary in docs/tour.md"


# -- item 10: the README's install makes `rabbitq` usable as the tutorial writes it -----


def test_the_readme_says_how_to_get_rabbitq_on_path_before_the_tutorial_uses_it():
    text = (ROOT / "README.md").read_text()
    tutorial = text.index("## Five-minute tutorial")
    first_bare = text.index("rabbitq worker myservice:app")
    assert tutorial < first_bare
    assert "source .venv/bin/activate" in text[:first_bare]


# -- item 10: the demo's next steps name rabbitq as the user can run it ----------------


def test_the_demo_names_the_program_as_it_was_run_when_rabbitq_is_not_on_path(
    monkeypatch, tmp_path
):
    from rabbitq.cli import demo as cli_demo

    monkeypatch.setattr(sys, "argv", [".venv/bin/rabbitq", "demo"])
    monkeypatch.setenv("PATH", str(tmp_path))  # no rabbitq there
    assert cli_demo._program() == ".venv/bin/rabbitq"


def test_the_demo_says_plain_rabbitq_when_path_finds_the_same_one(monkeypatch, tmp_path):
    from rabbitq.cli import demo as cli_demo

    program = tmp_path / "rabbitq"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(program), "demo"])
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cli_demo._program() == "rabbitq"
