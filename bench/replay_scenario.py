"""replay: a DLQ replay (``bench.replay.candidate``) against a raw aio-pika move loop
(``bench.replay.baseline``), both written with the DLQ tool. Skipped when
``bench/replay.py`` is not in this build."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from .common import Config


def _module() -> Any:
    return importlib.import_module("bench.replay")


def unavailable() -> str | None:
    if importlib.util.find_spec("bench.replay") is None:
        return "bench/replay.py (the DLQ tool's replay benchmark) is not in this build"
    return None


async def baseline(cfg: Config) -> dict[str, float]:
    return {"msg/s": float(await _module().baseline(cfg.url, cfg.small))}


async def candidate(cfg: Config) -> dict[str, float]:
    return {"msg/s": float(await _module().candidate(cfg.url, cfg.small))}
