"""The types of ``@app.handler`` and ``@app.batch_handler`` reach a user's type checker
(first hour, third round, item 4): mypy, run from a project outside the repository as a
user runs it, finds rabbitq through the README's editable install, sees a decorated
handler with its own signature, and flags a handler whose first parameter does not take
the model."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RIGHT = '''
from rabbitq import App, BatchContext, Context, Message


class SendEmail(Message, type="types.email"):
    to: str


app = App(queue="types-right")
other_app = App(queue="types-right-sync")


@app.handler(SendEmail)
async def send(msg: SendEmail, ctx: Context) -> None:
    print(msg.to, ctx.attempt)


@other_app.handler(SendEmail, timeout=5)  # a sync one, no Context
def log(msg: SendEmail) -> int:
    return len(msg.to)


class Caller:
    async def __call__(self, msg: SendEmail, ctx: Context) -> None: ...


other = App(queue="types-right-2")
other.handler(SendEmail)(Caller())


@other.batch_handler(SendEmail, max_size=10)
async def many(msgs: list[SendEmail], ctx: BatchContext) -> None: ...


reveal_type(send)
'''

WRONG = '''
from rabbitq import App, Context, Message


class SendEmail(Message, type="types.email"):
    to: str


class Refund(Message, type="types.refund"):
    amount: int


app = App(queue="types-wrong")


@app.handler(SendEmail)
async def send(msg: Refund, ctx: Context) -> None: ...


@app.batch_handler(Refund)
async def refunds(msgs: list[SendEmail]) -> None: ...
'''


def mypy(tmp_path: Path, name: str, source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-color-output",
         "--cache-dir", str(tmp_path / ".mypy_cache"), f"{name}.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_mypy_outside_the_repository_finds_rabbitq_and_keeps_the_handlers_signature(
    tmp_path,
):
    assert ROOT not in tmp_path.parents
    result = mypy(tmp_path, "right", RIGHT)
    assert "Cannot find implementation or library stub" not in result.stdout, result.stdout
    assert result.returncode == 0, result.stdout
    assert 'Revealed type is "def (right.SendEmail, ctx: rabbitq.context.Context)' in (
        result.stdout
    ), result.stdout


def test_mypy_flags_a_handler_whose_first_parameter_is_not_the_model(tmp_path):
    result = mypy(tmp_path, "wrong", WRONG)
    assert result.returncode == 1, result.stdout
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 2, result.stdout
    assert "wrong.py:16:" in errors[0] and '"Callable[[Refund, Context]' in errors[0]
    assert 'expected "Callable[[SendEmail, Context]' in errors[0]
    assert "wrong.py:20:" in errors[1] and "list[SendEmail]" in errors[1]
    assert "expected \"Callable[[list[Refund]]" in errors[1]
