"""The :class:`App`: one service's queue, its handlers and its retry policy.

An App is configuration plus a registry of handlers; it does no I/O until you ask it
for a publisher or run a worker, so it is safe to build at import time.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from types import EllipsisType
from typing import TYPE_CHECKING, Any, TypeVar

from .amqp.publisher import DEFAULT_TIMEOUT as DEFAULT_PUBLISH_TIMEOUT
from .amqp.publisher import Publisher
from .amqp.topology import DEFAULT_DELIVERY_LIMIT, DEFAULT_QUEUE_TYPE, QueueType, Topology, plan
from .breaker import Breaker
from .errors import AppLoadError, ConfigurationError, install_hint
from .handler import (
    DEFAULT_MAX_BODY_SIZE,
    Handler,
    HandlerFn,
    KeyFn,
    build_limit,
    check_breaker,
    check_max_body_size,
    check_timeout,
    is_async_fn,
    wants_context,
)
from .message import Message
from .ratelimit import RateBackend
from .retry import RetryPolicy
from .schedule.spec import DEFAULT_CATCH_UP, CatchUp, Schedules
from .settings import TLS, join_urls, resolve_url
from .status.backend import StatusStore, status_store
from .status.model import MessageStatus, fold
from .status.recorder import StatusTracing
from .status.writer import StatusWriter
from .tracing.base import NO_TRACING, Tracing

if TYPE_CHECKING:
    from .effects.outbox import Outbox
    from .effects.store import IdempotencyStore
    from .hooks import Hooks

M = TypeVar("M", bound=Message)
F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_TIMEOUT = 300.0





class App:
    """A service that consumes one queue. See the README for a tutorial.

    ``url`` defaults to ``$RABBITQ_URL`` (read when connecting, not here), else the
    local broker; a list (or commas) names the nodes of a cluster, to fail over between.
    ``prefetch`` is the number of handlers in flight per worker process.
    ``timeout`` is the default per-handler time limit in seconds (None: no limit).
    ``queue_type`` applies to every queue of the app, the DLQ included. It is
    ``"quorum"`` by default (RabbitMQ 3.10 or later): the broker then dead-letters a
    message that crashes the worker every time after ``delivery_limit`` deliveries, and
    dead-letters at-least-once; ``"classic"`` suits brokers before 3.10. Why, with
    figures: docs/reliability.md.
    ``max_body_size`` (bytes, None: no limit) dead-letters larger bodies as ``invalid``
    before they are parsed. ``breaker`` (default: none) pauses the queue while a
    handler's dependency is down (see :class:`~rabbitq.Breaker`). ``tls``: the CA and
    client certificate files for an ``amqps://`` URL (default: ``$RABBITQ_TLS_*``).
    ``tracing`` (default: none): ``rabbitq.tracing.OpenTelemetry()`` traces every
    publish, delivery, retry, dead letter and replay (see docs/providers.md).
    ``limit_waiting`` (default: ``prefetch``): when a handler has a ``rate_limit`` or
    ``concurrency``, how many deliveries may wait for their turn on top of the
    ``prefetch`` that run; the broker's prefetch is then the sum of both.
    ``idempotency`` (default: none) is the store of handled keys for every handler
    (:class:`~rabbitq.effects.PostgresStore`, :class:`~rabbitq.effects.RedisStore`;
    see docs/effects.md). ``outbox`` is set by :class:`~rabbitq.effects.Outbox`;
    ``loaded_as`` by :func:`load_app` (the ``MODULE:APP`` it was found by, for messages
    that name the app as the user does).
    ``status`` (default: none) records what happens to every message in that store (a
    ``PostgresStore`` or ``RedisStore``, the same object as ``idempotency`` if you like,
    or a :class:`~rabbitq.status.PostgresStatus` / ``RedisStatus``), best effort and off
    the path of the ack; :meth:`status` reads it back (see docs/status.md).
    """

    def __init__(
        self,
        *,
        queue: str,
        url: str | Sequence[str] | None = None,
        exchange: str = "rabbitq",
        prefetch: int = 64,
        retry: RetryPolicy | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        queue_type: QueueType = DEFAULT_QUEUE_TYPE,
        delivery_limit: int = DEFAULT_DELIVERY_LIMIT,
        max_body_size: int | None = DEFAULT_MAX_BODY_SIZE,
        breaker: Breaker | None = None,
        tls: TLS | None = None,
        tracing: Tracing | None = None,
        limit_waiting: int | None = None,
        idempotency: IdempotencyStore | None = None,
        status: StatusStore | IdempotencyStore | None = None,
    ) -> None:
        if prefetch < 1:
            raise ConfigurationError(f"prefetch must be at least 1, not {prefetch}")
        if not exchange:
            raise ConfigurationError("exchange must be a name; the default exchange is internal")
        self.queue = queue
        # several URLs (a cluster's nodes) are kept as one comma-separated string
        self.url = url if url is None or isinstance(url, str) else join_urls(url)
        self.exchange = exchange
        self.prefetch = prefetch
        self.retry = retry or RetryPolicy()
        self.timeout = check_timeout(timeout)
        self.queue_type: QueueType = queue_type
        self.delivery_limit = delivery_limit
        self.max_body_size = check_max_body_size(max_body_size)
        self.breaker = check_breaker(breaker)
        self.tls = tls
        self.tracing = tracing or NO_TRACING
        if limit_waiting is not None and (
            isinstance(limit_waiting, bool)
            or not isinstance(limit_waiting, int)
            or limit_waiting < 0
        ):
            raise ConfigurationError(f"limit_waiting must be 0 or more, not {limit_waiting!r}")
        self.limit_waiting = limit_waiting
        self.idempotency = idempotency
        self.outbox: Outbox | None = None
        self.loaded_as: str | None = None  # "MODULE:APP", when load_app found it
        self.status_writer: StatusWriter | None = None
        if status is not None:
            self.status_writer = StatusWriter(status_store(status))
            self.tracing = StatusTracing(self.status_writer, self.tracing)
        self._handlers: dict[str, Handler] = {}
        self.schedules = Schedules()  # @app.schedule(...) registers here (rabbitq.schedule)
        self.topology()  # validate names and arguments now, not at first connect

    def __repr__(self) -> str:
        return f"App(queue={self.queue!r}, exchange={self.exchange!r})"

    @property
    def handlers(self) -> Mapping[str, Handler]:
        """Registered handlers by message type name."""
        return self._handlers

    def handler(
        self,
        model: type[M],
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None | EllipsisType = ...,
        max_body_size: int | None | EllipsisType = ...,
        breaker: Breaker | None | EllipsisType = ...,
        rate_limit: str | None = None,
        burst: int = 1,
        concurrency: int | None = None,
        limiter: RateBackend | None = None,
        limit_key: str | None = None,
        idempotency: IdempotencyStore | None | EllipsisType = ...,
        key: KeyFn | None = None,
    ) -> Callable[[HandlerFn], HandlerFn]:
        """Register the decorated function (async or sync) as the handler of ``model``.

        ``retry``, ``timeout``, ``max_body_size`` and ``breaker`` override the app's for
        this handler; ``timeout=None`` means no time limit, ``max_body_size=None`` no size
        limit, ``breaker=None`` no circuit breaker.

        ``rate_limit="14/s"`` (or ``"100/m"``, ``"3/10s"``) starts at most that many
        handlers per period, ``burst`` of them at once; ``concurrency=N`` runs at most N
        at once. Both are kept per worker process unless ``limiter`` is shared
        (:class:`~rabbitq.ratelimit.RedisRates`: one budget and one cap for every
        process, the cap as renewed leases); handlers with the same ``limit_key``
        (default ``"<queue>:<type>"``) share one budget and one cap. Deliveries wait
        for their turn without using a handler slot, and are never retried or
        dead-lettered for it (see docs/providers.md).

        ``idempotency`` overrides the app's
        store (None: none); ``key`` maps the message to its idempotency key (default:
        ``ctx.message_id``), e.g. ``key=lambda m: m.payment_id``.
        """
        if not (isinstance(model, type) and issubclass(model, Message)):
            raise ConfigurationError(f"handler() takes a Message subclass, not {model!r}")
        name = model.type_name()
        if name in self._handlers:
            raise ConfigurationError(f"{self!r} already has a handler for {name!r}")

        limit = self.timeout if isinstance(timeout, EllipsisType) else check_timeout(timeout)
        size = (
            self.max_body_size
            if isinstance(max_body_size, EllipsisType)
            else check_max_body_size(max_body_size)
        )

        limits = build_limit(
            rate_limit=rate_limit,
            burst=burst,
            concurrency=concurrency,
            limiter=limiter,
            limit_key=limit_key,
            default_key=f"{self.queue}:{name}",
            prefetch=self.prefetch,
        )

        def register(fn: HandlerFn) -> HandlerFn:
            self._handlers[name] = Handler(
                model=model,
                fn=fn,
                retry=retry or self.retry,
                timeout=limit,
                is_async=is_async_fn(fn),
                wants_context=wants_context(fn),
                max_body_size=size,
                breaker=self.breaker
                if isinstance(breaker, EllipsisType)
                else check_breaker(breaker),
                limit=limits,
                idempotency=self.idempotency
                if isinstance(idempotency, EllipsisType)
                else idempotency,
                key=key,
            )
            return fn

        return register

    def schedule(
        self,
        *,
        cron: str | None = None,
        every: timedelta | None = None,
        tz: str | None = None,
        catch_up: CatchUp = DEFAULT_CATCH_UP,
        name: str | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated function (async or sync) as a periodic schedule.

        ``cron="0 9 * * MON-FRI"`` with ``tz="Europe/Berlin"`` (wall-clock times; default
        UTC), or ``every=timedelta(seconds=30)``. The function gets the tick time (aware)
        and returns the message or messages to publish; each tick is published once
        across every worker and ``rabbitq scheduler``, with a ``message_id`` derived from
        ``name`` (default: the function's name) and the tick. ``catch_up`` says which
        ticks missed while no scheduler ran are published: ``"none"``, ``"last"`` or
        ``"all"`` (at most 1000). See docs/schedules.md.
        """
        return self.schedules.decorator(cron=cron, every=every, tz=tz, catch_up=catch_up, name=name)

    def topology(self) -> Topology:
        """Every queue, argument and binding this app declares (pure, no I/O).

        One retry queue per delay that some handler uses: the app's own ``retry`` counts
        only through the handlers that do not override it.
        """
        delays = {ms for h in self._handlers.values() for ms in h.retry.delays_ms}
        return plan(
            queue=self.queue,
            exchange=self.exchange,
            delays_ms=delays,
            routing_keys=self._handlers,
            queue_type=self.queue_type,
            delivery_limit=self.delivery_limit,
        )

    async def status(self, message_id: str) -> MessageStatus | None:
        """What happened to ``message_id`` (its current state, attempts and history), from
        the app's status store; None if it has no record (unknown, or past retention).
        Raises ConfigurationError without ``App(status=...)``, and
        :class:`~rabbitq.effects.StoreUnavailable` (or the driver's error) when the store
        cannot be read."""
        if self.status_writer is None:
            raise ConfigurationError(f"{self!r} has no status store: App(status=...)")
        return fold(message_id, await self.status_writer.store.read(message_id))

    def resolved_url(self, override: str | None = None) -> str:
        """The URL to connect to: ``override``, else the app's, else ``$RABBITQ_URL``."""
        return resolve_url(override or self.url)

    def publisher(
        self,
        *,
        url: str | None = None,
        tls: TLS | None = None,
        hooks: Hooks | list[Hooks] | None = None,
        retry_for: float | None = None,
        timeout: float = DEFAULT_PUBLISH_TIMEOUT,
    ) -> Publisher:
        """An async context manager that publishes with confirms::

        async with app.publisher() as pub:
            await pub.publish(SendEmail(...))

        ``hooks`` observe each publish (a :class:`~rabbitq.Metrics` counts them).
        ``retry_for=S`` keeps retrying for up to S seconds while the broker is
        unreachable (see :class:`~rabbitq.Publisher`); by default a publish fails at once.
        ``timeout`` bounds the wait for one confirm (a blocked broker; default 60 s).
        """
        return Publisher(
            self,
            url=self.resolved_url(url),
            tls=tls or self.tls,
            hooks=hooks,
            retry_for=retry_for,
            timeout=timeout,
        )


def load_app(spec: str) -> App:
    """Import ``module.path:attribute`` and return the :class:`App` it names.

    The current directory is importable, as with ``python -m``, so that
    ``rabbitq worker myservice:app`` works from a project's root.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AppLoadError(f"expected MODULE:APP (for example 'myservice.tasks:app'), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # The module itself (or its package) is missing, not something it imports.
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise AppLoadError(
                f"cannot import module {module_name!r}: no such module "
                f"(run from the project's root or fix PYTHONPATH)"
            ) from exc
        raise AppLoadError(
            f"importing {module_name!r} failed: {exc}{install_hint(exc.name)}"
        ) from exc
    except Exception as exc:
        raise AppLoadError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AppLoadError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, App):
        raise AppLoadError(f"{spec!r} is a {type(obj).__name__}, not a rabbitq.App")
    obj.loaded_as = spec  # so that messages can name the app as the user does
    return obj
