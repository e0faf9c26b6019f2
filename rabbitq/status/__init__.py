"""The status of every message (docs/status.md): ``App(status=store)`` records each
message's life (published, received, started, retrying, succeeded, duplicate,
dead-lettered, replayed, purged) and ``await app.status(message_id)`` reads it back;
``await app.status(group_id)`` a workflow group's progress.

- :mod:`.model`: the states, a record, and the pure fold into a :class:`MessageStatus`;
- :mod:`.group`: a workflow group's progress, the pure fold into a :class:`GroupStatus`;
- :mod:`.lookup`: reading a message's or a group's status back;
- :mod:`.writer`: the bounded queue and the one task that writes it, best effort;
- :mod:`.recorder`: the tracing observer that makes the records;
- :mod:`.backend`, :mod:`.postgres`, :mod:`.redisstatus`: the stores;
- :mod:`.metrics`: ``rabbitq_status_records_total``.

:class:`PostgresStatus` and :class:`RedisStatus` need the ``postgres`` or ``redis``
extra; they are imported lazily. The package exports what a user reads or passes; the
folds, the states, the records and the writer are internal, imported from their
modules (``rabbitq.status.model.fold``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .backend import GroupReader, StatusStore
from .group import MAX_MEMBERS, GroupStatus
from .model import Entry, MessageStatus

if TYPE_CHECKING:
    from .postgres import PostgresStatus
    from .redisstatus import RedisStatus

__all__ = [
    "MAX_MEMBERS",
    "Entry",
    "GroupReader",
    "GroupStatus",
    "MessageStatus",
    "PostgresStatus",
    "RedisStatus",
    "StatusStore",
]

_LAZY = {"PostgresStatus": (".postgres", "postgres"), "RedisStatus": (".redisstatus", "redis")}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'rabbitq.status' has no attribute {name!r}")
    import importlib

    module_name, extra = _LAZY[name]
    try:
        module = importlib.import_module(module_name, __name__)
    except ImportError as exc:
        raise ImportError(
            f"rabbitq.status.{name} needs the {extra!r} extra: pip install 'rabbitq[{extra}]'"
        ) from exc
    return getattr(module, name)
