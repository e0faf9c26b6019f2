"""The :class:`App`: one service's queue, its handlers and its retry policy.

An App is configuration plus a registry of handlers; it does no I/O until you ask it
for a publisher or run a worker, so it is safe to build at import time.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from types import EllipsisType
from typing import TYPE_CHECKING, Any, TypeVar

from ._amqp.lanes import WHOLE, check_priorities, with_priority_step
from ._amqp.outgoing import PublishStep
from ._amqp.partition_plan import plan_app
from ._amqp.partitions import check_partitions, partition_queue
from ._amqp.publisher import DEFAULT_TIMEOUT as DEFAULT_PUBLISH_TIMEOUT
from ._amqp.publisher import Publisher
from ._amqp.sync_publisher import for_sync_code
from ._amqp.topology import DEFAULT_DELIVERY_LIMIT, DEFAULT_QUEUE_TYPE, QueueType, Topology
from .backends.defaults import Backend, app_stores
from .batch import DEFAULT_MAX_SIZE, DEFAULT_MAX_WAIT, BatchLimits
from .breaker import Breaker
from .cancellation.cancel import cancel as cancel_messages
from .cancellation.stage import cancel_stage
from .crypto import Keyring, encrypted, read_result
from .errors import ConfigurationError
from .handler import (
    DEFAULT_MAX_BODY_SIZE,
    BatchHandlerDecorator,
    Handler,
    HandlerDecorator,
    HandlerFn,
    KeyFn,
    OnDead,
    build_limit,
    check_breaker,
    check_limit_waiting,
    check_max_body_size,
    check_ordered,
    check_timeout,
    inherited,
    is_async_fn,
    wants_context,
)
from .job import Middleware, Stage, add_stage, check_middleware
from .message import Message
from .payloads.steps import with_blobs
from .payloads.store import BlobStore
from .ratelimit.gate import RateBackend
from .retry import RetryPolicy
from .schedule.spec import DEFAULT_CATCH_UP, CatchUp, Schedules
from .settings import TLS, join_urls, resolve_url
from .status.backend import StatusStore, status_store
from .status.group import GroupStatus
from .status.lookup import lookup
from .status.model import MessageStatus
from .status.recorder import StatusTracing
from .status.writer import StatusWriter
from .tracing.base import NO_TRACING, Tracing
from .unique.setup import with_keys

if TYPE_CHECKING:
    from .cancellation.model import CancelReport
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
    ``queue_type`` applies to every queue of the app, the DLQ included: ``"quorum"``
    (default; RabbitMQ 3.10 or later) dead-letters a message that crashes the worker
    after ``delivery_limit`` deliveries, at-least-once; ``"classic"`` suits older
    brokers (docs/reliability.md).
    ``max_body_size`` (bytes, None: no limit) dead-letters larger bodies as ``invalid``
    before they are parsed. ``breaker`` (default: none) pauses the queue while a
    handler's dependency is down (see :class:`~rabbitq.Breaker`). ``tls``: the CA and
    client certificate files for an ``amqps://`` URL (default: ``$RABBITQ_TLS_*``).
    ``tracing``: ``rabbitq.tracing.OpenTelemetry()`` traces every publish, delivery,
    retry, dead letter and replay (docs/providers.md).
    ``limit_waiting`` (default: ``prefetch``): when a handler has a ``rate_limit`` or
    ``concurrency``, how many deliveries may wait for their turn on top of the
    ``prefetch`` that run; the broker's prefetch is then the sum of both.
    ``idempotency`` (default: none, or ``backend``'s) is the store of handled keys for
    every handler (:class:`~rabbitq.effects.PostgresStore`, ``RedisStore``; see
    docs/effects.md). ``outbox`` is set by :class:`~rabbitq.effects.Outbox`; ``loaded_as``
    by :func:`load_app` (the ``MODULE:APP`` it was found by, for messages naming the app).
    ``status`` (default: none, or ``backend``'s) records every message's life in that store
    (a ``PostgresStore``, ``RedisStore``, ``PostgresStatus`` or ``RedisStatus``), best
    effort, off the path of the ack; :meth:`status` reads it back (see docs/status.md).
    ``partitions=N`` spreads the messages over N single-active-consumer queues by their
    ordering key, through the consistent-hash exchange (see docs/ordering.md). ``backend``
    (:class:`~rabbitq.backends.PostgresBackend`, ``RedisBackend``) gives all the stores,
    chords' too; an ``idempotency`` or ``status`` given as well wins for its kind.
    ``middleware``: the app's own stages, run for every decoded delivery before its
    handler, in the worker and in ``rabbitq.testing`` (docs/middleware.md).
    ``encryption``: a :class:`~rabbitq.crypto.Keyring`; bodies and failure texts are
    encrypted with its current key, read with any of its keys (docs/privacy.md).
    ``large_payloads`` (a :class:`~rabbitq.payloads.PostgresBlobs` or ``S3Blobs``) keeps
    bodies above its ``above`` size out of the broker (docs/payloads.md).
    ``priorities=N``: ``publish(msg, priority=k)``, 0 to N-1, by weight (docs/control.md).
    ``cancellable=True``: :meth:`cancel` works, and each delivery is first looked up in
    the store's cancellations (needs a ``backend`` or store; docs/control.md, "Cancel").
    ``debounce=True`` (with a store): ``publish(debounce=...)`` works (docs/control.md).
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
        partitions: int = 0,
        middleware: Sequence[Middleware] = (),
        backend: Backend | None = None,
        encryption: Keyring | None = None,
        large_payloads: BlobStore | None = None,
        priorities: int = 0,
        cancellable: bool = False,
        debounce: bool = False,
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
        self.limit_waiting = check_limit_waiting(limit_waiting)
        idempotency, status = app_stores(backend, idempotency, status)  # explicit ones win
        self.idempotency = idempotency
        self.outbox: Outbox | None = None
        self.loaded_as: str | None = None  # "MODULE:APP", when load_app found it
        self.status_writer: StatusWriter | None = None
        if status is not None:
            self.status_writer = StatusWriter(status_store(status))
            self.tracing = StatusTracing(self.status_writer, self.tracing)
        self.middleware = check_middleware(middleware)  # docs/middleware.md
        # What the app's capabilities add to every publish and to every delivery (before
        # its decode), in their fixed order (amqp.outgoing.add_step, job.add_stage).
        self.publish_steps: tuple[PublishStep, ...] = ()
        self.delivery_stages: tuple[Stage, ...] = ()
        self.encryption = encryption  # docs/privacy.md
        if encryption is not None:
            self.publish_steps, self.delivery_stages = encrypted(self, encryption)
        self.large_payloads = large_payloads  # docs/payloads.md
        self.publish_steps, self.delivery_stages = with_blobs(self, large_payloads)
        if cancellable:  # docs/control.md, "Cancel"
            cancel = cancel_stage(backend, idempotency, status)
            self.delivery_stages = add_stage(self.delivery_stages, cancel)
        self.publish_steps, self.delivery_stages = with_keys(self, debounce)  # unique, debounce
        self.partitions = check_partitions(partitions)  # docs/ordering.md
        self.partition_index = 0  # of the view that partition()'s worker runs
        self.partition_base = queue  # partitions: <it>.p0, ...; its views keep it
        self.priorities, self.lane = check_priorities(priorities, partitions=partitions), WHOLE
        self.publish_steps = with_priority_step(self.publish_steps, queue, self.priorities)
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
        ordered_by: KeyFn | None = None,
        on_dead: OnDead = "skip",
    ) -> HandlerDecorator[M]:
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

        ``idempotency`` overrides the app's store (None: none); ``key`` maps the message to
        its idempotency key (default: ``ctx.message_id``), e.g. ``lambda m: m.payment_id``.

        ``ordered_by=lambda m: m.account_id``: messages with the same key run one at a
        time, in delivery order, a failed one retried in the worker before the next
        (docs/ordering.md); ``on_dead="block"`` keeps a key blocked after its dead letter.
        """
        if not (isinstance(model, type) and issubclass(model, Message)):
            raise ConfigurationError(f"handler() takes a Message subclass, not {model!r}")
        name = model.type_name()
        if name in self._handlers:
            raise ConfigurationError(f"{self!r} already has a handler for {name!r}")
        dead = check_ordered(ordered_by, on_dead)
        limit = inherited(timeout, self.timeout, check_timeout)
        size = inherited(max_body_size, self.max_body_size, check_max_body_size)
        circuit = inherited(breaker, self.breaker, check_breaker)
        store = inherited(idempotency, self.idempotency, lambda given: given)
        limits = build_limit(
            rate_limit=rate_limit, burst=burst, concurrency=concurrency, limiter=limiter,
            limit_key=limit_key, default_key=f"{self.queue}:{name}", prefetch=self.prefetch,
        )  # fmt: skip

        def register(fn: HandlerFn) -> HandlerFn:
            self._handlers[name] = Handler(
                model=model, fn=fn, retry=retry or self.retry, timeout=limit,
                is_async=is_async_fn(fn), wants_context=wants_context(fn), max_body_size=size,
                breaker=circuit, limit=limits, idempotency=store, key=key,
                ordered_by=ordered_by, on_dead=dead,
            )  # fmt: skip
            return fn

        return register

    def batch_handler(
        self,
        model: type[M],
        *,
        max_size: int = DEFAULT_MAX_SIZE,
        max_wait: float = DEFAULT_MAX_WAIT,
        retry: RetryPolicy | None = None,
        timeout: float | None | EllipsisType = ...,
        max_body_size: int | None | EllipsisType = ...,
        breaker: Breaker | None | EllipsisType = ...,
        idempotency: IdempotencyStore | None | EllipsisType = ...,
        key: KeyFn | None = None,
    ) -> BatchHandlerDecorator[M]:
        """Register the decorated ``async def fn(msgs: list[M], ctx: BatchContext)`` as the
        batch handler of ``model``: called with up to ``max_size`` messages, at most
        ``max_wait`` seconds after the first of them arrived (docs/batches.md).

        It returns None (all succeeded), raises (all failed, each retried on its own
        attempt count) or returns a :class:`~rabbitq.BatchResult` (those it names failed,
        the rest succeeded). ``timeout`` is per batch; with an ``idempotency`` store,
        messages whose ``key`` is done or repeated in the batch are acked as duplicates
        before the call. ``max_size`` must fit in the app's prefetch."""
        register: Callable[[HandlerFn], HandlerFn] = self.handler(
            model,
            retry=retry,
            timeout=timeout,
            max_body_size=max_body_size,
            breaker=breaker,
            idempotency=idempotency,
            key=key,
        )
        limits = BatchLimits(max_size, max_wait)
        limits.check_prefetch(model.type_name(), self.prefetch)

        def register_batch(fn: HandlerFn) -> HandlerFn:
            if not is_async_fn(fn):
                raise ConfigurationError(f"batch handler {fn.__qualname__} must be async def")
            register(fn)
            name = model.type_name()
            self._handlers[name] = dataclasses.replace(self._handlers[name], batch=limits)
            return fn

        return register_batch

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
        ``"all"`` (at most 1000). See docs/schedules.md."""
        return self.schedules.decorator(cron=cron, every=every, tz=tz, catch_up=catch_up, name=name)

    def topology(self) -> Topology:
        """Every queue, argument and binding this app declares (pure, no I/O).

        One retry queue per delay that some handler uses: the app's own ``retry`` counts
        only through the handlers that do not override it.
        """
        return plan_app(self)

    def partition(self, index: int) -> App:
        """This app as the worker of partition ``index`` sees it: the same handlers,
        ``queue`` that partition's queue (``App(partitions=N)``, docs/ordering.md)."""
        view = copy.copy(self)
        view.partition_index, view.queue = index, partition_queue(self.partition_base, index)
        view.topology()  # the index is checked
        return view

    async def status(self, message_id: str) -> MessageStatus | GroupStatus | None:
        """What happened to ``message_id`` (state, attempts, history) from the app's status
        store; None without a record. A workflow's group id gives a
        :class:`~rabbitq.status.GroupStatus` (docs/status.md). ConfigurationError without
        a status store; :class:`~rabbitq.effects.StoreUnavailable` when it cannot be read."""
        if self.status_writer is None:
            raise ConfigurationError(f"{self!r} has no status store: App(status=...)")
        return await lookup(self.status_writer.store, message_id)

    async def cancel(self, *message_ids: str) -> list[CancelReport]:
        """Cancel queued messages (``App(cancellable=True)``); one
        :class:`~rabbitq.cancellation.CancelReport` per id says what each was."""
        return await cancel_messages(self, message_ids)

    async def result(self, message_id: str) -> Any:
        """What ``message_id``'s handler returned (JSON), kept in the app's status store;
        None if nothing is kept (docs/workflows.md). ConfigurationError without one."""
        return await read_result(self, message_id)

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
        """An async context manager that publishes with confirms:
        ``async with app.publisher() as pub: await pub.publish(SendEmail(...))``.
        ``hooks`` observe each publish (a :class:`~rabbitq.Metrics` counts them).
        ``retry_for=S`` keeps retrying for up to S seconds while the broker is
        unreachable (see :class:`~rabbitq.Publisher`); by default a publish fails at once.
        ``timeout`` bounds the wait for one confirm (a blocked broker; default 60 s)."""
        return Publisher(
            self,
            url=self.resolved_url(url),
            tls=tls or self.tls,
            hooks=hooks,
            retry_for=retry_for,
            timeout=timeout,
        )

    sync_publisher = for_sync_code(publisher)
    """:meth:`publisher`'s options, for synchronous code: a :class:`~rabbitq.SyncPublisher`,
    one per process for all its threads; its ``publish`` blocks until confirmed."""
