"""The event loop ``rabbitq worker`` runs on: uvloop when it is installed (a dependency
of rabbitq on Linux and macOS CPython), else asyncio's own. See docs/benchmarks.md for
what it changes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def factory(name: str = "auto") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for ``name``: ``auto`` (uvloop if installed), ``uvloop`` or
    ``asyncio``; None means asyncio's default."""
    if name == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if name == "uvloop":
            raise
        return None
    new: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return new


def name_of(loop_factory: Callable[[], asyncio.AbstractEventLoop] | None) -> str:
    """``uvloop`` or ``asyncio``, for logs."""
    return "asyncio" if loop_factory is None else "uvloop"


def run(main: Coroutine[Any, Any, T], *, loop: str = "auto") -> T:
    """``asyncio.run(main)`` on the loop chosen by :func:`factory`."""
    with asyncio.Runner(loop_factory=factory(loop)) as runner:
        return runner.run(main)
