"""What an :class:`~rabbitq.App` takes from ``App(backend=...)``: the default store of
each kind, an explicit ``idempotency=`` or ``status=`` winning for its kind."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .postgres import PostgresBackend
from .redis import RedisBackend

if TYPE_CHECKING:
    from ..effects.store import IdempotencyStore
    from ..status.backend import StatusStore

Backend = PostgresBackend | RedisBackend


def app_stores(
    backend: Backend | None,
    idempotency: IdempotencyStore | None,
    status: StatusStore | IdempotencyStore | None,
) -> tuple[IdempotencyStore | None, StatusStore | IdempotencyStore | None]:
    """The app's ``(idempotency, status)``: each as given, else ``backend``'s (none
    without a backend). The chord store follows from the status store's location
    (:func:`rabbitq.workflow.chords.chord_store`): the backend's too."""
    if backend is None:
        return idempotency, status
    return (
        backend.idempotency() if idempotency is None else idempotency,
        backend.status() if status is None else status,
    )
