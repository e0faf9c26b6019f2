"""The documentation site: ``mkdocs build --strict`` passes (a broken link, a broken anchor,
a page missing from the nav or an API reference that cannot be generated is an error),
the API reference covers every public name, and the README's links into docs/ land."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest

import rabbitq
from rabbitq.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = mkdocs_build(ROOT / "mkdocs.yml", out)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def page(site: Path, doc: str) -> str:
    """The built HTML of ``docs/<doc>`` (``contract.md`` -> ``contract/index.html``)."""
    stem = doc.removesuffix(".md")
    path = site / ("index.html" if stem == "index" else f"{stem}/index.html")
    return path.read_text()


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(site):
    assert (site / "index.html").is_file()
    # The API reference is generated from the docstrings, not written by hand.
    app = page(site, "reference/app.md")
    assert "A service that consumes one queue" in app  # App's docstring
    assert "prefetch" in app and "idempotency" in app  # its signature
    assert "exactly the code the worker runs" in page(site, "reference/testing.md")
    # Sphinx roles in docstrings read as code, not as ":class:`~rabbitq.Breaker`".
    for html in (site / "reference").rglob("*.html"):
        assert not re.search(r":(class|func|meth|mod|attr|data|exc):<code>", html.read_text())


@pytest.mark.slow
def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    copy = tmp_path / "project"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy)
    shutil.copy(ROOT / "CHANGELOG.md", copy)
    (copy / "rabbitq").symlink_to(ROOT / "rabbitq")
    (copy / "scripts").symlink_to(ROOT / "scripts")
    index = copy / "docs" / "index.md"
    index.write_text(
        index.read_text() + "\n[gone](no-such-page.md) and [moved](dlq.md#no-such-heading)\n"
    )
    done = mkdocs_build(copy / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr and "no-such-heading" in done.stderr


def reference_targets() -> set[str]:
    """Every ``::: dotted.name`` the API reference renders."""
    return {
        match
        for path in (DOCS / "reference").glob("*.md")
        for match in re.findall(r"^::: (\S+)", path.read_text(), flags=re.M)
    }


def test_the_api_reference_renders_every_name_rabbitq_exports():
    documented = {name.removeprefix("rabbitq.") for name in reference_targets()}
    public = set(rabbitq.__all__) - {"__version__"}
    assert public <= documented, f"add to docs/reference/: {sorted(public - documented)}"


def test_the_api_reference_covers_the_modules_users_import():
    targets = reference_targets()
    for module in ("rabbitq.testing", "rabbitq.effects", "rabbitq.dlq"):
        assert any(t == module or t.startswith(f"{module}.") for t in targets), module


def readme_links() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return [
        link
        for link in re.findall(r"\]\(([^)\s]+)\)", text)
        if not re.match(r"[a-z]+://|mailto:|#", link)
    ]


def test_every_link_in_the_readme_lands_on_a_file_and_anchor_that_exist(site):
    links = readme_links()
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), link
        if anchor:
            assert path.startswith("docs/") and path.endswith(".md"), link
            html = page(site, path.removeprefix("docs/"))
            assert f'id="{anchor}"' in html, f"{link}: no such heading in the built page"


def test_the_readme_links_to_the_contract_and_the_docs_never_to_a_file_outside_the_repo():
    text = (ROOT / "README.md").read_text()
    assert "docs/contract.md" in text and "docs/cli.md" in text
    for path in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        assert "DESIGN.md" not in path.read_text(), path


# -- docs/cli.md lists every command and option --------------------------------------------

# Options docs/cli.md describes once for every command, not on each command's line.
SHARED = {"--help", "--url", "--tls-ca", "--tls-cert", "--tls-key", "--type", "--reason",
          "--message-id", "--since", "--until", "--grep"}  # fmt: skip


def commands(group: click.Group = cli, prefix: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def usage_lines(name: str) -> str:
    """The lines of docs/cli.md's code blocks for ``rabbitq <name>``, continuations
    included."""
    blocks = re.findall(r"```\n(.*?)```", (DOCS / "cli.md").read_text(), flags=re.S)
    lines, mine = [], False
    for line in "\n".join(blocks).splitlines():
        if line.startswith("rabbitq "):
            mine = line.startswith(name + " ")
        if mine:
            lines.append(line)
    return "\n".join(lines)


@pytest.mark.parametrize(("path", "command"), list(commands()), ids=lambda v: " ".join(v)
                         if isinstance(v, tuple) else "")  # fmt: skip
def test_the_cli_page_shows_every_command_with_every_option(path, command):
    name = "rabbitq " + " ".join(path)
    lines = usage_lines(name)
    assert lines, f"{name} has no usage line in docs/cli.md"
    for param in command.params:
        for opt in param.opts:
            if opt.startswith("--") and opt not in SHARED:
                assert opt in lines, f"{name}: {opt} missing from docs/cli.md"


# -- docs/contract.md names what the code puts on the wire ---------------------------------

PACKAGE = ROOT / "rabbitq"
# String constants that start with "rabbitq-" but are not message headers.
NOT_HEADERS = {
    "rabbitq-effects",  # the Redis client name of the idempotency store
    "rabbitq-status",  # the Redis client name of the status store
    "rabbitq-workflow",  # the Redis client name of the chord store
    "rabbitq-keys",  # the Redis client name of the unique and debounce key store
    "rabbitq-dlq",  # the format name of a DLQ export file (docs/dlq.md)
    "rabbitq-handler",  # the name prefix of sync handler threads
    "rabbitq-demo",  # the demo's queue and exchange (docs/cli.md)
}


def contract() -> str:
    return (DOCS / "contract.md").read_text()


def test_the_contract_names_every_header_rabbitq_writes():
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    constants = set(re.findall(r'^[A-Z_]+ = "(rabbitq-[a-z-]+)"', source, flags=re.M))
    headers = constants - NOT_HEADERS | {"traceparent", "tracestate"}
    assert "rabbitq-attempt" in headers and "rabbitq-causation-id" in headers
    missing = {name for name in headers if f"`{name}`" not in contract()}
    assert not missing, f"headers missing from docs/contract.md: {sorted(missing)}"


class ContractCheck(rabbitq.Message, type="tests.docs-site.contract-check"):
    n: int


@pytest.mark.parametrize("queue_type", ["quorum", "classic"])
def test_the_contract_names_every_queue_argument_and_queue_name(queue_type):
    app = rabbitq.App(queue="emails", queue_type=queue_type)
    app.handler(ContractCheck)(lambda msg: None)
    topology = app.topology()
    text = contract()
    assert f"`{topology.exchange}`" in text
    for spec in (topology.main, *topology.retries, topology.dlq):
        for argument in spec.arguments:
            assert f"`{argument}" in text, f"{spec.name}: {argument} missing from the contract"
    names = {topology.main.name, topology.dlq.name, "emails.retry.<label>"}
    assert all(f"`{name}`" in text for name in names), names
    assert [r.name for r in topology.retries] == [
        f"emails.retry.{label}" for label in ("1s", "10s", "1m", "10m")
    ]


def test_the_docs_name_every_environment_variable_rabbitq_reads():
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    variables = set(re.findall(r'"(RABBITQ_[A-Z_]+)"', source))
    assert "RABBITQ_URL" in variables
    docs = contract() + (DOCS / "cli.md").read_text()
    assert not {v for v in variables if v not in docs}, variables


# -- README, LICENSE, CHANGELOG ------------------------------------------------------------


def test_the_module_table_of_developing_rabbitq_is_one_unbroken_table():
    text = (DOCS / "development.md").read_text()  # moved from the README
    section = text.split("\n## Inside\n", 1)[1].split("\n## ", 1)[0]
    table = section[section.index("\n| module | owns |") :].strip().splitlines()
    assert all(line.startswith("|") for line in table), [
        line for line in table if not line.startswith("|")
    ]


def test_the_licence_file_is_the_mit_licence_pyproject_names():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "MIT"
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "the rabbitq authors" in text


def test_the_changelog_keeps_a_changelog_with_this_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert "## [Unreleased]" in text
    assert re.search(rf"^## \[{re.escape(version)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.M)
    sections = set(re.findall(r"^### (\w+)$", text, flags=re.M))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
