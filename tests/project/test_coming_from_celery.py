"""docs/coming-from-celery.md names only what exists, and misses no public capability
(first hour, fourth round, item 2: the page said "no synchronous publisher yet" while
``app.sync_publisher()`` existed).

What the page says of rabbitq is read from its code: the python blocks, the inline code
spans of the prose and the mapping table's rabbitq column (the Celery and Dramatiq
columns, and a block introduced by "Celery:" or "Dramatiq:", are the other libraries').
Every ``app.X``, ``pub.X`` (``Publisher``), ``publisher.X`` (``SyncPublisher``) and
``ctx.X`` (``Context``) must exist, with the keyword arguments its calls pass; so must
the keywords of ``App(...)`` and ``publish(...)``, every ``from rabbitq... import``,
every ``rabbitq.a.b`` and every ``RabbitqName.attr``. Every ``rabbitq ...`` command line
must walk click's command tree, and each of its ``--options`` must be one of that
command's. Then :data:`CAPABILITIES` must each be named, with a link to their guide.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest

import rabbitq
from rabbitq import App, Context, Publisher, SyncPublisher
from rabbitq.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "coming-from-celery.md"

# The public modules whose names a page may use without importing them first.
MODULES = (
    "rabbitq", "rabbitq.backends", "rabbitq.effects", "rabbitq.ratelimit", "rabbitq.payloads",
    "rabbitq.crypto", "rabbitq.testing", "rabbitq.tracing", "rabbitq.dlq", "rabbitq.schedule",
)  # fmt: skip

# What a Celery or Dramatiq user looks for first: (what the page must say, the guide it
# must link to, whether the code has it). The code check keeps the list honest.
CAPABILITIES: dict[str, tuple[str, str, Callable[[], bool]]] = {
    "sync publisher": ("app.sync_publisher()", "control.md", lambda: _app("sync_publisher")),
    "cancel": ("app.cancel(", "control.md#cancel", lambda: _app("cancel")),
    "cancel from the shell": ("rabbitq cancel", "control.md#cancel", lambda: _cmd("cancel")),
    "priorities": ("App(priorities=", "control.md#priorities", lambda: _takes(App, "priorities")),
    "unique": ("unique_for=", "control.md#unique-publishes", lambda: _publish("unique_for")),
    "debounce": ("debounce=", "control.md#debounce", lambda: _publish("debounce")),
    "schedules": ("@app.schedule(", "schedules.md", lambda: _app("schedule")),
    "workflows": ("chord(", "workflows.md", lambda: hasattr(rabbitq, "chord")),
    "status": ("app.status(", "status.md", lambda: _app("status")),
    "status from the shell": ("rabbitq status", "status.md", lambda: _cmd("status")),
    "console": ("rabbitq console", "console.md", lambda: _cmd("console")),
    "dlq": ("rabbitq dlq", "dlq.md", lambda: _cmd("dlq")),
    "delays": ("delay=", "delays.md", lambda: _publish("delay")),
    "rate limits": ("rate_limit=", "providers.md", lambda: _takes(App.handler, "rate_limit")),
    "testing without a broker": ("rabbitq.testing.deliver", "", lambda: True),
}


def _takes(fn: Callable[..., Any], keyword: str) -> bool:
    return keyword in inspect.signature(fn).parameters


def _publish(keyword: str) -> bool:
    return _takes(Publisher.publish, keyword)


def _app(attr: str) -> bool:
    return hasattr(App, attr)


def _cmd(name: str) -> bool:
    return name in cli.commands


# -- reading the page ----------------------------------------------------------------

FENCE = re.compile(r"^```(?P<lang>\w*)[^\n]*\n(?P<code>.*?)^```", re.M | re.S)
INLINE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")
FOREIGN_INTRO = re.compile(r"^(Celery|Dramatiq):\s*$")


def code_of(text: str) -> Iterator[tuple[str, str]]:
    """(``python`` | ``bash`` | ``inline``, code) of everything the page says of rabbitq."""
    prose, last = [], 0
    for fence in FENCE.finditer(text):
        before = text[last : fence.start()]
        prose.append(before)
        last = fence.end()
        intro = [line for line in before.splitlines() if line.strip()][-1:]
        if intro and FOREIGN_INTRO.match(intro[0]):
            continue  # the other library's example
        yield (fence["lang"] or "text"), fence["code"]
    prose.append(text[last:])
    for part in prose:
        for line_block in _rabbitq_side(part):
            for span in INLINE.findall(line_block):
                yield "inline", " ".join(span.split())


def _rabbitq_side(prose: str) -> Iterator[str]:
    """The prose, each table row reduced to its last cell (the rabbitq column)."""
    lines, out = prose.splitlines(), []
    for line in lines:
        if line.startswith("|"):
            cells = [c for c in line.strip().strip("|").split("|")]
            out.append(cells[-1] if cells else "")
        else:
            out.append(line)
    yield "\n".join(out)


# -- what exists ----------------------------------------------------------------------


@functools.cache
def public_names() -> dict[str, Any]:
    names: dict[str, Any] = {}
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", [n for n in dir(module) if not n.startswith("_")]):
            try:
                names.setdefault(name, getattr(module, name))
            except (AttributeError, ImportError):  # an extra that is not installed
                continue
    return names


@functools.cache
def an_app() -> App:
    return App(queue="coming-from-celery-check")


def has(kind: type, attr: str) -> bool:
    """Whether ``kind`` (or an instance of it) has ``attr``: a method, a property, a
    dataclass field or an attribute set by ``__init__``."""
    if hasattr(kind, attr) or attr in getattr(kind, "__dataclass_fields__", {}):
        return True
    return kind is App and hasattr(an_app(), attr)


def signature_of(kind: type, attr: str) -> inspect.Signature | None:
    """The signature a call of ``kind.attr`` is checked against; a sync publisher's
    methods take what the async publisher's of the same name take."""
    fn = getattr(kind, attr, None)
    if kind is SyncPublisher and hasattr(Publisher, attr):
        fn = getattr(Publisher, attr)
    if fn is None or not callable(fn):
        return None
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def bad_keywords(sig: inspect.Signature | None, call: ast.Call) -> list[str]:
    if sig is None or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return []
    return [k.arg for k in call.keywords if k.arg is not None and k.arg not in sig.parameters]


# -- python --------------------------------------------------------------------------

RECEIVERS: dict[str, type] = {"app": App, "pub": Publisher, "publisher": SyncPublisher,
                              "ctx": Context}  # fmt: skip
MADE_BY = {("app", "publisher"): Publisher, ("app", "sync_publisher"): SyncPublisher}


def parse(code: str) -> ast.AST | None:
    source = code.strip().removeprefix("@")  # a decorator, written alone
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    try:
        tree: ast.AST = compile(source, "<page>", "exec", flags=flags)
        return tree
    except SyntaxError:
        return None


def kind_of(node: ast.AST) -> type | None:
    """What the page's convention says an expression is: ``app`` an App, ``pub`` a
    Publisher, ``app.sync_publisher()`` a SyncPublisher, and so on."""
    if isinstance(node, ast.Name):
        return RECEIVERS.get(node.id)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
    ):
        return MADE_BY.get((node.func.value.id, node.func.attr))
    return None


def dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (head := dotted(node.value)):
        return f"{head}.{node.attr}"
    return None


def resolve(path: str) -> bool:
    """Whether ``rabbitq.a.b`` names a module or an attribute that exists."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def python_problems(code: str) -> list[str]:
    tree = parse(code)
    if tree is None:
        return []
    found: list[str] = []
    names = public_names()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rabbitq"):
            module = importlib.import_module(node.module or "rabbitq")
            found += [f"from {node.module} import {a.name}: no such name"
                      for a in node.names if not hasattr(module, a.name)]  # fmt: skip
        elif isinstance(node, ast.Attribute):
            kind = kind_of(node.value)
            path = dotted(node)
            if kind is not None and not has(kind, node.attr):
                found.append(f"{kind.__name__} has no {node.attr!r}")
            elif path and path.startswith("rabbitq.") and not resolve(path):
                found.append(f"{path} does not exist")
            elif isinstance(node.value, ast.Name) and node.value.id in names:
                if not hasattr(names[node.value.id], node.attr):
                    found.append(f"{node.value.id} has no {node.attr!r}")
        elif isinstance(node, ast.Call):
            func, sig, what = node.func, None, ""
            if isinstance(func, ast.Attribute) and (kind := kind_of(func.value)) is not None:
                sig, what = signature_of(kind, func.attr), f"{kind.__name__}.{func.attr}"
            elif isinstance(func, ast.Name) and func.id == "publish":
                sig, what = signature_of(Publisher, "publish"), "publish"
            elif isinstance(func, ast.Name) and callable(names.get(func.id)):
                try:
                    sig, what = inspect.signature(names[func.id]), func.id
                except (TypeError, ValueError):
                    sig = None
            found += [f"{what}() takes no {k}=" for k in bad_keywords(sig, node)]
    return found


# -- the command line ----------------------------------------------------------------


def options_of(command: click.Command) -> set[str]:
    opts = {"--help", "-h"}
    for param in command.params:
        if isinstance(param, click.Option):
            opts.update(param.opts, param.secondary_opts)
    return opts


def command_problems(line: str) -> list[str]:
    """``rabbitq worker app:app --reload  # ...`` walked through click's command tree."""
    line = line.split(" #", 1)[0].strip()
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    if not words or words[0] != "rabbitq":
        return []
    found, commands, chosen, path = [], [cli], False, ["rabbitq"]
    for word in words[1:]:
        if word.startswith("-"):
            name = word.split("=", 1)[0]
            for command in commands:
                if name not in options_of(command):
                    found.append(f"{line!r}: {command.name} has no option {name}")
            continue
        groups = [c for c in commands if isinstance(c, click.Group)]
        if groups and not chosen:
            subs = word.split("/")
            found += [f"{line!r}: no command {' '.join([*path, s])!r}"
                      for s in subs if s not in groups[0].commands]  # fmt: skip
            commands = [groups[0].commands[s] for s in subs if s in groups[0].commands]
            path.append(word)
            chosen = not any(isinstance(c, click.Group) for c in commands)
            if not commands:
                break
        else:
            chosen = True  # an argument: the command is chosen
    return found


def cli_lines(kind: str, code: str) -> Iterator[str]:
    if kind == "inline":
        if code.startswith("rabbitq "):
            yield code
        return
    if kind in ("bash", "sh", "shell", "console", "text", ""):
        lines = (line.strip() for line in code.splitlines())
        yield from (line for line in lines if line.startswith("rabbitq"))


# -- the page as a whole --------------------------------------------------------------


def problems(text: str) -> list[str]:
    found: list[str] = []
    for kind, code in code_of(text):
        if kind in ("python", "inline"):
            found += python_problems(code)
        for line in cli_lines(kind, code):
            found += command_problems(line)
    return found


def missing_capabilities(text: str) -> list[str]:
    return [
        f"{name}: the page does not name {said!r}" + (f" with a link to {guide}" if guide else "")
        for name, (said, guide, _) in CAPABILITIES.items()
        if said not in text or (guide and f"]({guide}" not in text)
    ]


def test_every_capability_in_the_list_exists_in_the_code():
    assert not [name for name, (_, _, exists) in CAPABILITIES.items() if not exists()]


def test_the_page_names_only_apis_commands_and_options_that_exist():
    assert problems(PAGE.read_text()) == []


def test_the_page_names_every_public_capability_and_links_its_guide():
    assert missing_capabilities(PAGE.read_text()) == []


def test_the_page_reads_code_it_can_check():
    """The checks see the page: not a page of spans they skip."""
    spans = list(code_of(PAGE.read_text()))
    assert sum(1 for kind, code in spans if parse(code) is not None) > 50
    assert sum(1 for kind, code in spans for _ in cli_lines(kind, code)) > 15


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ("`app.sync_publishr()`", "App has no 'sync_publishr'"),
        ("`await app.cancel(id, force=True)`", "App.cancel() takes no force="),
        ("`App(priority=3)`", "App() takes no priority="),
        ("`publish(msg, countdown=90)`", "publish() takes no countdown="),
        ("`pub.publish_later(msg)`", "Publisher has no 'publish_later'"),
        ("`ctx.retries`", "Context has no 'retries'"),
        ("`@app.task(M)`", "App has no 'task'"),
        ("`@app.handler(M, max_retries=3)`", "App.handler() takes no max_retries="),
        ("```python\nfrom rabbitq import Celery\n```", "from rabbitq import Celery: no such name"),
        ("`rabbitq.testing.eager(app)`", "rabbitq.testing.eager does not exist"),
        ("`RetryLater.later(3)`", "RetryLater has no 'later'"),
        ("`rabbitq revoke app:app ID`", "no command 'rabbitq revoke'"),
        ("`rabbitq worker app:app --concurrency 4`", "worker has no option --concurrency"),
        ("`rabbitq dlq list/shw emails`", "no command 'rabbitq dlq shw'"),
        ("```bash\nrabbitq purge app:app --force   # empty\n```", "purge has no option --force"),
        ("| `celery -A proj beat` | `periodiq` | `rabbitq beat app:app` |", "'rabbitq beat'"),
    ],
)
def test_the_checks_catch_a_name_that_does_not_exist(snippet, expected):
    found = problems(snippet)
    assert any(expected in problem for problem in found), found


def test_the_checks_leave_the_other_libraries_names_alone():
    page = (
        "| `@app.task` | `actor.send_with_options(delay=1)` | `@app.handler(M)` |\n\n"
        "Celery:\n\n```python\n@app.task(autoretry_for=(Exception,))\ndef f(): ...\n```\n"
    )
    assert problems(page) == []


def test_a_page_without_the_sync_publisher_misses_a_capability():
    text = PAGE.read_text().replace("app.sync_publisher()", "asyncio.run(...)")
    assert any(m.startswith("sync publisher") for m in missing_capabilities(text))
