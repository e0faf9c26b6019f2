"""The public surface changes only with a CHANGELOG line.

The public surface is every name in ``rabbitq.__all__`` (written ``rabbitq.X``), in the
``__all__`` of each public sub-package (``rabbitq.pkg.X``, the packages in
``PUBLIC_PACKAGES``) and in ``rabbitq.testing.__all__``. ``public_names.txt`` beside this
file is the surface of the last release (the newest version section of CHANGELOG.md).

The workflow:

- Adding a public name, or removing one from an ``__all__``, needs a line in the
  ``## [Unreleased]`` section of CHANGELOG.md that names it in backticks, as `X`,
  `rabbitq.X` or `rabbitq.pkg.X` (a call such as `X(...)` counts too). Until then this
  test fails and says which name lacks its line.
- At release time, when ``## [Unreleased]`` becomes the new version's section, refresh
  the snapshot: ``python -m tests.project.test_public_names``, and commit it.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).with_name("public_names.txt")
CHANGELOG = ROOT / "CHANGELOG.md"

# The sub-packages whose ``__all__`` is public; any other package or module is internal.
PUBLIC_PACKAGES = (
    "backends",
    "cancellation",
    "crypto",
    "dlq",
    "effects",
    "payloads",
    "ladder",
    "ratelimit",
    "schedule",
    "status",
    "tracing",
    "workflow",
)
PUBLIC_MODULES = ("testing",)
REFRESH = "python -m tests.project.test_public_names"


def current_surface() -> set[str]:
    import rabbitq

    names = {f"rabbitq.{name}" for name in rabbitq.__all__}
    for sub in PUBLIC_PACKAGES + PUBLIC_MODULES:
        module = importlib.import_module(f"rabbitq.{sub}")
        names |= {f"rabbitq.{sub}.{name}" for name in module.__all__}
    return names


def snapshot_lines() -> list[str]:
    return [
        line.strip()
        for line in SNAPSHOT.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def unreleased() -> str:
    text = CHANGELOG.read_text()
    start = text.index("## [Unreleased]")
    end = text.find("\n## [", start + 1)
    return text[start : end if end != -1 else len(text)]


def backticked(section: str) -> set[str]:
    """Every backtick span of ``section``, its whitespace collapsed (a span may wrap)."""
    return {" ".join(span.split()) for span in re.findall(r"`([^`]+)`", section)}


def mentioned(qualified: str, spans: set[str]) -> bool:
    """``qualified`` (``rabbitq[.pkg].X``) is named by a span that is `X` or
    `rabbitq[.pkg].X`, alone or called (`X(...)`)."""
    forms = (qualified, qualified.rsplit(".", 1)[1])
    return any(span == form or span.startswith(form + "(") for span in spans for form in forms)


def test_the_snapshot_is_sorted_unique_and_only_names_rabbitq_and_its_public_packages():
    lines = snapshot_lines()
    assert lines == sorted(set(lines)), f"{SNAPSHOT.name}: keep it sorted, one name a line"
    prefixes = ("rabbitq.",)
    for name in lines:
        parts = name.split(".")
        assert name.startswith(prefixes) and len(parts) in (2, 3), name
        if len(parts) == 3:
            assert parts[1] in PUBLIC_PACKAGES + PUBLIC_MODULES, name


def test_every_name_added_since_the_last_release_has_a_changelog_line():
    spans = backticked(unreleased())
    added = sorted(current_surface() - set(snapshot_lines()))
    missing = [name for name in added if not mentioned(name, spans)]
    assert not missing, "\n".join(
        f"{name} is public now but was not in the last release ({SNAPSHOT.name}), and the "
        f"'## [Unreleased]' section of CHANGELOG.md does not name it: add a line with "
        f"`{name}` (under ### Added); if a release was just made, refresh the snapshot "
        f"instead: {REFRESH}"
        for name in missing
    )


def test_every_name_removed_since_the_last_release_has_a_changelog_line():
    spans = backticked(unreleased())
    removed = sorted(set(snapshot_lines()) - current_surface())
    missing = [name for name in removed if not mentioned(name, spans)]
    assert not missing, "\n".join(
        f"{name} was public in the last release ({SNAPSHOT.name}) and is not any more, and "
        f"the '## [Unreleased]' section of CHANGELOG.md does not name it: add a line with "
        f"`{name}` (under ### Changed or ### Removed, saying where it went); if a release "
        f"was just made, refresh the snapshot instead: {REFRESH}"
        for name in missing
    )


def test_what_counts_as_naming_a_name():
    spans = backticked("## [Unreleased]\n\n- `rabbitq.Job`, `Middleware(x)`\n  and `Out\ncome`")
    assert mentioned("rabbitq.Job", spans)
    assert mentioned("rabbitq.Middleware", spans)
    assert not mentioned("rabbitq.Outcome", spans)  # "Out come" is not the name
    assert not mentioned("rabbitq.dlq.replay", backticked("`rabbitq dlq replay`"))


def write_snapshot() -> None:
    header = (
        "# The public surface of the last release: tests/project/test_public_names.py.\n"
        f"# Refresh it at release time only: {REFRESH}\n"
    )
    SNAPSHOT.write_text(header + "".join(f"{name}\n" for name in sorted(current_surface())))


if __name__ == "__main__":
    write_snapshot()
    print(f"wrote {SNAPSHOT}", file=sys.stderr)
