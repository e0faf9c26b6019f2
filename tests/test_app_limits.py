"""The App-level limits API: @app.handler(M, rate_limit=..., concurrency=..., limiter=...)."""

from __future__ import annotations

import pytest

from rabbitq import App, ConfigurationError, Message
from rabbitq.ratelimit import LocalRates
from rabbitq.ratelimit.rate import parse_rate
from rabbitq.tracing.base import NO_TRACING


class Ping(Message, type="limits.ping"):
    n: int = 0


def _app(**kwargs: object) -> App:
    return App(queue="limits-test", prefetch=16, **kwargs)  # type: ignore[arg-type]


def test_a_handler_without_limits_has_none() -> None:
    app = _app()

    @app.handler(Ping)
    async def ping(msg: Ping) -> None: ...

    assert app.handlers["limits.ping"].limit is None


def test_a_rate_and_a_concurrency_are_kept_with_the_handler() -> None:
    app = _app()
    backend = LocalRates()

    @app.handler(Ping, rate_limit="14/s", burst=2, concurrency=3, limiter=backend)
    async def ping(msg: Ping) -> None: ...

    limit = app.handlers["limits.ping"].limit
    assert limit is not None
    assert limit.rate == parse_rate("14/s", burst=2)
    assert (limit.concurrency, limit.backend, limit.key) == (3, backend, "limits-test:limits.ping")


def test_handlers_can_share_one_budget_by_key() -> None:
    app = _app()

    @app.handler(Ping, rate_limit="10/s", limit_key="provider:acme")
    async def ping(msg: Ping) -> None: ...

    limit = app.handlers["limits.ping"].limit
    assert limit is not None and limit.key == "provider:acme" and limit.concurrency is None


def test_a_shared_limiter_may_hold_a_concurrency_cap_alone() -> None:
    app = _app()
    backend = LocalRates()  # any limiter; RedisRates makes the cap shared (tests/ratelimit)

    @app.handler(Ping, concurrency=2, limiter=backend, limit_key="provider:acme")
    async def ping(msg: Ping) -> None: ...

    limit = app.handlers["limits.ping"].limit
    assert limit is not None and limit.rate is None
    assert (limit.concurrency, limit.backend, limit.key) == (2, backend, "provider:acme")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate_limit": "fast"},
        {"concurrency": 0},
        {"concurrency": 17},  # above the prefetch of 16
        {"concurrency": True},
        {"limiter": LocalRates()},  # a limiter without a rate or a cap
        {"limit_key": "k"},
        {"concurrency": 2, "limit_key": "k"},  # a per-process cap has no shared name
        {"rate_limit": "1/s", "limiter": object()},
        {"rate_limit": "2/s", "burst": 3},
    ],
)
def test_limits_that_cannot_work_are_refused_at_registration(kwargs: dict[str, object]) -> None:
    app = _app()
    with pytest.raises(ConfigurationError):
        app.handler(Ping, **kwargs)  # type: ignore[arg-type]


def test_tracing_is_off_by_default() -> None:
    assert _app().tracing is NO_TRACING


def test_metrics_count_limit_waits_and_the_current_concurrency() -> None:
    from rabbitq import Metrics

    app = _app()

    @app.handler(Ping, rate_limit="5/s", concurrency=2)
    async def ping(msg: Ping) -> None: ...

    metrics = Metrics()
    metrics.expect(app)
    r = metrics.registry
    labels = {"queue": "limits-test", "type": "limits.ping"}
    assert r.get_sample_value("rabbitq_limit_wait_seconds_count", labels) == 0
    assert r.get_sample_value("rabbitq_limit_concurrency", labels) == 0
    metrics.limit_waited("limits-test", "limits.ping", 0.3)
    metrics.limit_waited("limits-test", "limits.ping", 0.0)
    metrics.limit_running("limits-test", "limits.ping", 2)
    assert r.get_sample_value("rabbitq_limit_wait_seconds_count", labels) == 2
    assert r.get_sample_value("rabbitq_limit_wait_seconds_sum", labels) == 0.3
    assert r.get_sample_value("rabbitq_limit_wait_seconds_bucket", {**labels, "le": "0.25"}) == 1
    assert r.get_sample_value("rabbitq_limit_concurrency", labels) == 2
