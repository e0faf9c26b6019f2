"""Shell completion, as docs/cli.md tells users to set it up: the real ``rabbitq``
command prints a completion script for bash, zsh and fish, and completes commands,
subcommands and options."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RABBITQ = Path(sys.executable).with_name("rabbitq")


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RABBITQ)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def complete(words: str) -> list[str]:
    """What bash completion offers after ``words`` (the last word being typed)."""
    parts = words.split(" ")
    done = run(
        {
            "_RABBITQ_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(parts) - 1),
        }
    )
    assert done.returncode == 0, done.stderr
    return [line.split(",", 1)[1] for line in done.stdout.splitlines()]


def test_the_docs_give_the_setup_line_for_bash_zsh_and_fish():
    text = (ROOT / "docs" / "cli.md").read_text()
    for shell in ("bash", "zsh", "fish"):
        assert f"_RABBITQ_COMPLETE={shell}_source rabbitq" in text


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_rabbitq_prints_a_completion_script_for_each_shell(shell):
    done = run({"_RABBITQ_COMPLETE": f"{shell}_source"})
    assert done.returncode == 0, done.stderr
    assert "_rabbitq_completion" in done.stdout
    assert "_RABBITQ_COMPLETE" in done.stdout


def test_commands_subcommands_and_options_complete():
    assert complete("rabbitq dl") == ["dlq"]
    assert set(complete("rabbitq dlq re")) == {"replay"}
    assert "--prefetch" in complete("rabbitq worker --pre")
    assert complete("rabbitq worker x:app --log-level w") == ["warning"]


def test_the_bash_script_loads_and_registers_the_completion():
    script = run({"_RABBITQ_COMPLETE": "bash_source"}).stdout
    done = subprocess.run(
        ["bash", "-c", f"{script}\ncomplete -p rabbitq"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"-F _rabbitq_completion .*rabbitq", done.stdout), done.stdout


def test_dlq_reasons_complete_with_rabbitqs_and_the_brokers_reasons():
    from rabbitq.retry import DLQ_REASONS

    offered = complete("rabbitq dlq list emails --reason ")
    assert set(DLQ_REASONS) <= set(offered) and "broker:delivery_limit" in offered
    assert complete("rabbitq dlq purge emails --reason ex") == ["exhausted"]
    assert complete("rabbitq dlq replay emails --reason unk") == ["unknown-type"]
