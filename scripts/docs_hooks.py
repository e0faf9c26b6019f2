"""MkDocs hook (mkdocs.yml ``hooks:``): the docstrings cross-reference names with Sphinx
roles (``:class:`~rabbitq.Breaker```), which Markdown renders as the role's text followed
by the code. Show only the code, shortened as Sphinx does where the target starts with
``~``: ``:class:`~rabbitq.Breaker``` reads ``Breaker``."""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:attr|class|data|exc|func|meth|mod|obj):<code>(~?)([^<]*)</code>")


def _code(match: re.Match[str]) -> str:
    short, target = match[1], match[2]
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub(_code, html)
