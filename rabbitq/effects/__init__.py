"""Once-only effects on top of at-least-once delivery (docs/effects.md).

- :class:`PostgresStore`, :class:`RedisStore`: idempotency stores for
  ``App(idempotency=...)`` and ``@app.handler(M, idempotency=..., key=...)``: a handled
  key is remembered, a key in progress elsewhere is not run twice at once.
- :class:`Outbox`: messages written in the caller's database transaction and published by
  a relay (``rabbitq outbox relay MODULE:APP``).

Both need an extra: ``pip install 'rabbitq[postgres]'`` or ``'rabbitq[redis]'``. The
names are imported lazily, so that ``rabbitq.effects`` imports without either driver.
:class:`IdempotencyStore` is the protocol both stores follow; :class:`StoreUnavailable`
and :class:`LeaseLost` are what they raise. The rest (the claim states, the relay, the
batcher) is internal and imported from its module, e.g. ``rabbitq.effects.store``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .store import IdempotencyStore, LeaseLost, StoreUnavailable

if TYPE_CHECKING:
    from .outbox import Outbox
    from .postgres import PostgresStore
    from .redisstore import RedisStore

__all__ = [
    "IdempotencyStore",
    "LeaseLost",
    "Outbox",
    "PostgresStore",
    "RedisStore",
    "StoreUnavailable",
]

_LAZY = {
    "Outbox": (".outbox", "postgres"),
    "PostgresStore": (".postgres", "postgres"),
    "RedisStore": (".redisstore", "redis"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'rabbitq.effects' has no attribute {name!r}")
    import importlib

    module_name, extra = _LAZY[name]
    try:
        module = importlib.import_module(module_name, __name__)
    except ImportError as exc:
        raise ImportError(
            f"rabbitq.effects.{name} needs the {extra!r} extra: pip install 'rabbitq[{extra}]'",
            name=exc.name,
        ) from exc
    return getattr(module, name)
