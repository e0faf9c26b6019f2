"""The pure decisions of a batch (docs/batches.md): which messages of a batch are
repeats of a key seen earlier in it (:func:`first_of_each_key`), and which messages a
batch handler's answer says failed (:func:`failures_of`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..batch import BatchResult
from ..errors import ConfigurationError


def first_of_each_key(keys: Sequence[str]) -> tuple[list[int], dict[int, int]]:
    """The indices of the first message of each key, in order, and every later one's
    index mapped to the index of the first with its key (a duplicate within the batch)."""
    first: dict[str, int] = {}
    keep: list[int] = []
    repeats: dict[int, int] = {}
    for i, key in enumerate(keys):
        if key in first:
            repeats[i] = first[key]
        else:
            first[key] = i
            keep.append(i)
    return keep, repeats


def failures_of(answer: object, messages: Sequence[Any], handler: str) -> dict[int, Exception]:
    """The index (in ``messages``, the list the handler was given) and the failure of
    each message the handler's ``answer`` names: None names none, a
    :class:`~rabbitq.BatchResult` those it holds. Anything else, a message named twice,
    an index out of range or a message that is not in the list is a
    :class:`~rabbitq.ConfigurationError` (the handler's bug: the whole batch fails)."""
    if answer is None:
        return {}
    if not isinstance(answer, BatchResult):
        raise ConfigurationError(
            f"batch handler {handler} returned {type(answer).__name__}: return None "
            f"(all succeeded) or a rabbitq.BatchResult"
        )
    positions = {id(m): i for i, m in enumerate(messages)}
    failed: dict[int, Exception] = {}
    for item, error in answer:
        if isinstance(item, int):
            if not 0 <= item < len(messages):
                raise ConfigurationError(
                    f"batch handler {handler} named message {item}, but its batch has "
                    f"{len(messages)} (indices 0 to {len(messages) - 1})"
                )
            index = item
        else:
            found = positions.get(id(item))
            if found is None:
                raise ConfigurationError(
                    f"batch handler {handler} named a message that is not in its batch: {item!r}"
                )
            index = found
        if index in failed:
            raise ConfigurationError(
                f"batch handler {handler} named message {index} of its batch twice"
            )
        failed[index] = error
    return failed
