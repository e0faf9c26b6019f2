"""Every page of the site's menu is linked from the docs home, and every guide from the
tour (first hour, fourth round, item 7: the home and docs/tour.md, "a tour of every
guide", linked none of the newer guides; only the menu and the README did).

The pages come from ``mkdocs.yml``'s ``nav``: the home (docs/index.md) must link each of
its pages in docs/ (the API reference by its own index), and docs/tour.md each page of
the "Guides" section. A link is a markdown link ``[text](page.md)`` or
``[text](page.md#anchor)``; the site's build checks that it lands.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)\s]*)?\)")


class _Loader(yaml.SafeLoader):
    """mkdocs.yml's ``!!python/name:`` tags (a Markdown extension's formatter) read as None."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def nav() -> list[Any]:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)
    entries: list[Any] = config["nav"]
    return entries


def pages(entries: list[Any], section: str = "") -> Iterator[tuple[str, str]]:
    """(the top-level section, the page's path under docs/) of every page in the menu."""
    for entry in entries:
        if isinstance(entry, str):
            yield section, entry
            continue
        for title, value in entry.items():
            if isinstance(value, str):
                yield section, value
            else:
                yield from pages(value, section or title)


def linked(page: str) -> set[str]:
    """The pages under docs/ that ``page`` links to."""
    here = (DOCS / page).parent
    return {
        (here / target).resolve().relative_to(DOCS.resolve()).as_posix()
        for target in LINK.findall((DOCS / page).read_text())
        if not target.startswith(("http:", "https:"))
    }


def home_must_link() -> list[str]:
    """Every page of the menu in docs/ itself, and the reference's index."""
    every = [p for _, p in pages(nav()) if p != "index.md"]
    return [p for p in every if "/" not in p or p == "reference/index.md"]


def guides() -> list[str]:
    return [p for section, p in pages(nav()) if section == "Guides"]


def missing(text_links: set[str], wanted: list[str]) -> list[str]:
    return [p for p in wanted if p not in text_links]


def test_the_menu_is_read_whole():
    everything = [p for _, p in pages(nav())]
    assert "index.md" in everything and "coming-from-celery.md" in everything
    assert len(guides()) >= 17 and "privacy.md" in guides() and "middleware.md" in guides()
    assert all((DOCS / p).is_file() for p in everything), everything


def test_the_home_links_every_page_of_the_menu():
    assert missing(linked("index.md"), home_must_link()) == []


def test_the_tour_links_every_guide():
    assert missing(linked("tour.md"), guides()) == []


@pytest.mark.parametrize("dropped", ["coming-from-celery.md", "privacy.md", "payloads.md"])
def test_a_guide_left_out_of_the_home_or_the_tour_is_found(dropped):
    for page, wanted in (("index.md", home_must_link()), ("tour.md", guides())):
        text = (DOCS / page).read_text()
        left = LINK.sub(lambda m: "]()" if m[1] == dropped else m[0], text)
        links = {t for t in LINK.findall(left)}
        assert dropped in missing(links, wanted), page
