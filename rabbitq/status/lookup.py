"""Reading a status back: a message's, or a workflow group's (``App.status``).

An id is looked up first as a group (when the store can read groups,
:class:`~rabbitq.status.backend.GroupReader`), then as a message: group ids and message
ids are both opaque, and a group's callback may be given an id made from its group's.
"""

from __future__ import annotations

from .backend import GroupReader, IdFinder, StatusStore
from .group import MAX_MEMBERS, GroupStatus, fold_group
from .model import MessageStatus, fold


async def message_status(store: StatusStore, message_id: str) -> MessageStatus | None:
    """The status of the message ``message_id``; None if ``store`` has no record of it."""
    return fold(message_id, await store.read(message_id))


async def group_status(
    store: StatusStore, group_id: str, *, limit: int = MAX_MEMBERS
) -> GroupStatus | None:
    """The progress of the group ``group_id`` (at most ``limit`` members read); None if
    ``store`` has no record of it or cannot read groups."""
    if not isinstance(store, GroupReader):
        return None
    return fold_group(group_id, await store.read_group(group_id, limit))


async def ids_starting_with(store: StatusStore, prefix: str, *, limit: int) -> list[str] | None:
    """At most ``limit`` message ids with records that start with ``prefix`` (sorted);
    None if ``store`` cannot search ids (:class:`~rabbitq.status.backend.IdFinder`)."""
    if not prefix or not isinstance(store, IdFinder):
        return None
    return sorted(await store.ids_starting_with(prefix, limit))[:limit]


async def lookup(store: StatusStore, key: str) -> MessageStatus | GroupStatus | None:
    """The group ``key`` if ``store`` has records of one, else the message ``key``, else
    None."""
    group = await group_status(store, key)
    return group if group is not None else await message_status(store, key)
