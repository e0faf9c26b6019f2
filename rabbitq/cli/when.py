"""``WHEN``, the type of the DLQ tools' ``--since`` and ``--until``: a time that cannot
be read is bad input (exit 2), said before anything connects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..dlq.message import parse_when
from ..errors import DlqError

if TYPE_CHECKING:
    _Base = click.ParamType[str]
else:  # generic only since click 8.2; the project allows 8.1
    _Base = click.ParamType


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
