"""The times and durations the commands read: ``WHEN``, the type of the DLQ tools'
``--since`` and ``--until``, and ``DURATION``, the type of every ``--delay`` (``5``,
``90s``, ``5m``, ``2h``, ``3d``). One that cannot be read is bad input (exit 2), said
before anything connects."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import click

from ..dlq.message import parse_when
from ..errors import DlqError

if TYPE_CHECKING:
    _Base = click.ParamType[str]
    _FloatBase = click.ParamType[float]
else:  # generic only since click 8.2; the project allows 8.1
    _Base = click.ParamType
    _FloatBase = click.ParamType


class When(_Base):
    """An ISO 8601 date or time, or an age (``90s``, ``15m``, ``2h``, ``3d``); kept as
    the text given, checked with :func:`rabbitq.dlq.parse_when`."""

    name = "when"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        try:
            parse_when(text)
        except DlqError as exc:
            self.fail(str(exc), param, ctx)
        return text


WHEN = When()


_DURATION = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d|w)?$")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """Seconds in ``text``: a number (seconds) or a number and a unit, ``ms``, ``s``,
    ``m``, ``h``, ``d`` or ``w`` (``1.5``, ``90s``, ``5m``, ``2h``); ValueError if it
    is neither (a negative number among them)."""
    match = _DURATION.match(text.strip().lower())
    if match is None and text.strip().startswith("-"):
        raise ValueError(f"a duration cannot be negative: {text!r}")
    if match is None:
        raise ValueError(
            f"cannot read the duration {text!r}: give seconds (30, 1.5) or a number and "
            "a unit (500ms, 90s, 5m, 2h, 3d)"
        )
    return float(match[1]) * _SECONDS[match[2] or "s"]


class Duration(_FloatBase):
    """A duration in seconds, written as :func:`parse_duration` reads it."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = Duration()
