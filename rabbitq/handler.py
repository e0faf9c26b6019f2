"""A registered handler (:class:`Handler`) and the checks of what ``App(...)`` and
``@app.handler(...)`` are given (pure): one-line ``ConfigurationError`` for bad input."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import EllipsisType
from typing import TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, Protocol, TypeVar

from .batch import BatchLimits
from .breaker import Breaker
from .errors import ConfigurationError
from .message import Message
from .ratelimit.gate import Limit, RateBackend
from .ratelimit.rate import parse_rate
from .retry import RetryPolicy

if TYPE_CHECKING:
    from .effects.store import IdempotencyStore

HandlerFn = Callable[..., Any]
KeyFn = Callable[[Any], object]  # the message -> its idempotency key (str() is applied)
OnDead = Literal["skip", "block"]  # an ordered key after a dead letter (docs/ordering.md)

M = TypeVar("M", bound=Message)
P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
A = TypeVar("A", bound=Awaitable[Any])


class HandlerDecorator(Protocol[M]):
    """What ``@app.handler(M)`` returns: it registers the function and returns it as it was,
    with its own signature, so that a type checker sees the handler's parameters and flags
    one whose first parameter does not take an ``M``. Async or sync, with or without a
    ``Context``, or an object with an ``async def __call__``."""

    def __call__(self, fn: Callable[Concatenate[M, P], R], /) -> Callable[Concatenate[M, P], R]: ...


class BatchHandlerDecorator(Protocol[M]):
    """What ``@app.batch_handler(M)`` returns: as :class:`HandlerDecorator`, for an async
    function whose first parameter takes a ``list[M]``."""

    def __call__(
        self, fn: Callable[Concatenate[list[M], P], A], /
    ) -> Callable[Concatenate[list[M], P], A]: ...


# Bodies above this are dead-lettered as ``invalid`` before any parsing (see docs/safety.md).
DEFAULT_MAX_BODY_SIZE = 4 * 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class Handler:
    """A registered handler: the function and how it is run."""

    model: type[Message]
    fn: HandlerFn
    retry: RetryPolicy
    timeout: float | None
    is_async: bool
    wants_context: bool
    max_body_size: int | None = DEFAULT_MAX_BODY_SIZE
    breaker: Breaker | None = None
    limit: Limit | None = None  # rate and concurrency limits (rabbitq.ratelimit)
    idempotency: IdempotencyStore | None = None
    key: KeyFn | None = None  # None: ctx.message_id
    batch: BatchLimits | None = None  # a batch handler (@app.batch_handler): fn takes a list
    ordered_by: KeyFn | None = None  # same key: one at a time, in order (worker.ordering)
    on_dead: OnDead = "skip"

    @property
    def type_name(self) -> str:
        """The message type this handler consumes."""
        return self.model.type_name()


def wants_context(fn: HandlerFn) -> bool:
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if not params or len(params) > 2:
        name = getattr(fn, "__qualname__", repr(fn))  # a callable object has none
        raise ConfigurationError(f"handler {name} must take (message) or (message, ctx)")
    return len(params) == 2


def is_async_fn(fn: HandlerFn) -> bool:
    # An object with ``async def __call__`` is not a coroutine function to inspect; run
    # as sync it would return an unawaited coroutine and the message would be acked.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def check_max_body_size(size: int | None) -> int | None:
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ConfigurationError(f"max_body_size must be positive bytes or None, not {size!r}")
    return size


def check_breaker(breaker: Breaker | None) -> Breaker | None:
    if breaker is not None and not isinstance(breaker, Breaker):
        raise ConfigurationError(f"breaker must be a rabbitq.Breaker or None, not {breaker!r}")
    return breaker


def check_timeout(timeout: float | None) -> float | None:
    if timeout is not None and not timeout > 0:
        raise ConfigurationError(f"timeout must be positive seconds or None, not {timeout!r}")
    return timeout


def inherited(given: T | EllipsisType, default: T, check: Callable[[T], T]) -> T:
    """A handler's option: the app's ``default`` where it was not given (``...``), else
    ``given`` as ``check`` accepts it (None included: "none for this handler")."""
    return default if isinstance(given, EllipsisType) else check(given)


def build_limit(
    *,
    rate_limit: str | None,
    burst: int,
    concurrency: int | None,
    limiter: RateBackend | None,
    limit_key: str | None,
    default_key: str,
    prefetch: int,
) -> Limit | None:
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise ConfigurationError(f"concurrency must be a positive integer, not {concurrency!r}")
    if concurrency is not None and concurrency > prefetch:
        raise ConfigurationError(
            f"concurrency={concurrency} is above the app's prefetch ({prefetch}): "
            f"no more than prefetch handlers run at once anyway"
        )
    if rate_limit is None:
        if concurrency is None:
            if limiter is not None or limit_key is not None:
                raise ConfigurationError("limiter and limit_key need a rate_limit or concurrency")
            return None
        if limit_key is not None and limiter is None:
            raise ConfigurationError(
                "limit_key needs a rate_limit or a shared limiter (a concurrency cap alone "
                "is per process)"
            )
    if limiter is not None and not callable(getattr(limiter, "acquire", None)):
        raise ConfigurationError(
            f"limiter must be a rate backend (LocalRates, RedisRates), not {limiter!r}"
        )
    return Limit(
        rate=None if rate_limit is None else parse_rate(rate_limit, burst=burst),
        concurrency=concurrency,
        backend=limiter,
        key=limit_key or default_key,
    )


def check_ordered(ordered_by: KeyFn | None, on_dead: str) -> OnDead:
    if ordered_by is not None and not callable(ordered_by):
        raise ConfigurationError(f"ordered_by must map a message to its key, not {ordered_by!r}")
    if on_dead not in ("skip", "block"):
        raise ConfigurationError(f"on_dead must be 'skip' or 'block', not {on_dead!r}")
    if on_dead == "block" and ordered_by is None:
        raise ConfigurationError("on_dead='block' needs ordered_by: it blocks a key")
    return "block" if on_dead == "block" else "skip"


def check_limit_waiting(limit_waiting: int | None) -> int | None:
    """``App(limit_waiting=...)``: None (the prefetch) or a whole number, 0 or more."""
    if limit_waiting is not None and (
        isinstance(limit_waiting, bool) or not isinstance(limit_waiting, int) or limit_waiting < 0
    ):
        raise ConfigurationError(f"limit_waiting must be 0 or more, not {limit_waiting!r}")
    return limit_waiting
