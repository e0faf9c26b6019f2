"""What unique and debounced publishes add to an app (``App(debounce=...)``; the pure
choice, and the error when the app has no store to hold keys in)."""

from __future__ import annotations

from typing import Any

from .._amqp.outgoing import PublishStep, add_step
from ..errors import ConfigurationError
from ..job import Stage, add_stage
from .steps import DebounceStep, UniqueStep
from .store import key_store

NO_STORE = (
    "debounce=True needs a store to hold its keys: "
    "App(backend=PostgresBackend(...) or RedisBackend(...))"
)


def with_keys(app: Any, debounce: bool) -> tuple[tuple[PublishStep, ...], tuple[Stage, ...]]:
    """``app``'s publish steps and delivery stages, with the ``unique`` step when it has
    a PostgreSQL or Redis store (its idempotency store's, else its status store's
    location), and with ``debounce`` the ``debounce`` step and the ``superseded`` stage
    (a worker of an app whose producers debounce must have it). Without a store
    ``unique_for=`` is refused at publish; ``debounce=True`` here."""
    steps, stages = app.publish_steps, app.delivery_stages
    writer = app.status_writer
    store = key_store(app.idempotency, None if writer is None else writer.store)
    if store is None:
        if debounce:
            raise ConfigurationError(NO_STORE)
        return steps, stages
    from .superseded import SupersededStage

    steps = add_step(steps, UniqueStep(store, writer))
    if debounce:
        steps = add_step(steps, DebounceStep(store))
        stages = add_stage(stages, SupersededStage(store))
    return steps, stages
