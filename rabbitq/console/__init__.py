"""The operator web console (``rabbitq console``; needs ``pip install 'rabbitq[console]'``).

Modules: ``fingerprint`` (failure groups, pure), ``history`` and ``chart`` (depths over
time, rates, the SVG chart; pure), ``targets`` (which queues), ``views`` (page data,
pure), ``actions`` (page snapshots, what an action touches, jobs), ``security`` (token,
sessions, CSRF), ``state`` (the sampler and shared state), ``routes`` (pages and
actions), ``server`` (the ASGI app); the command is :mod:`rabbitq.cli.console`.
Importing this package imports nothing optional; :func:`create_app` needs the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from .state import Config

__all__ = ["create_app"]


def create_app(config: Config, *, sample: bool = True) -> Starlette:
    """The console's ASGI application (see :func:`rabbitq.console.server.create_app`)."""
    from .server import create_app as create

    return create(config, sample=sample)
