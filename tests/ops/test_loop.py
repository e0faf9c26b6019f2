"""Choosing the event loop: uvloop when installed, asyncio's own on request."""

from __future__ import annotations

import asyncio

import pytest

from rabbitq._ops import loop


async def _loop_class_name() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_asyncio_runs_on_asyncios_own_loop():
    assert loop.factory("asyncio") is None
    assert loop.run(_loop_class_name(), loop="asyncio").startswith("asyncio")


def test_auto_runs_on_uvloop_when_it_is_installed():
    pytest.importorskip("uvloop")
    assert loop.name_of(loop.factory("auto")) == "uvloop"
    assert loop.run(_loop_class_name()).startswith("uvloop")


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert loop.factory("auto") is None
    with pytest.raises(ImportError):
        loop.factory("uvloop")
