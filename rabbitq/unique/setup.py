"""What unique and debounced publishes add to an app (``App(debounce=...)``), and the
one place an app's store becomes its key store (:func:`key_store`)."""

from __future__ import annotations

from typing import Any

from .._amqp.outgoing import PublishStep, add_step
from ..effects.location import PostgresLocation, RedisLocation
from ..errors import ConfigurationError
from ..job import Stage, add_stage
from .steps import DebounceStep, UniqueStep
from .store import KeyStore

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


def key_store(*stores: Any) -> KeyStore | None:
    """The key store beside the first of ``stores`` (an app's idempotency and status
    stores) that has a :mod:`~rabbitq.effects.location`: the same database and prefix,
    or the same Redis and key base, and their retention; None without one."""
    for store in stores:
        location = getattr(store, "location", None)
        if isinstance(location, PostgresLocation):
            from .keys_pg import PostgresKeys

            return PostgresKeys(location)
        if isinstance(location, RedisLocation):
            from .keys_redis import RedisKeys

            return RedisKeys(location)
    return None
