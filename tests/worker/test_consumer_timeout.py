"""The start-up check of handler timeouts against the broker's ``consumer_timeout``."""

from __future__ import annotations

import logging

from rabbitq import App, Message
from rabbitq._worker.consumer_timeout import (
    DEFAULT_CONSUMER_TIMEOUT,
    check_timeouts,
    on_channel_closed,
    timeout_problems,
)


class Job(Message, type="limits.job"):
    n: int


class Slow(Message, type="limits.slow"):
    n: int


class Unbounded(Message, type="limits.unbounded"):
    n: int


def make_app() -> App:
    app = App(queue="limits", timeout=60)
    app.handler(Job)(lambda m: None)
    app.handler(Slow, timeout=1700)(lambda m: None)
    app.handler(Unbounded, timeout=None)(lambda m: None)
    return app


def test_handlers_well_below_the_consumer_timeout_are_fine():
    app = App(queue="limits", timeout=60)
    app.handler(Job)(lambda m: None)
    assert timeout_problems(app.handlers, 1800) == []


def test_a_handler_too_close_to_or_past_the_consumer_timeout_is_named_with_the_limit():
    problems = timeout_problems(make_app().handlers, 1800)
    assert len(problems) == 2
    slow = next(p for p in problems if "limits.slow" in p)
    assert "1700s" in slow and "1800s" in slow and "keep it under 1620s" in slow
    assert any("'limits.unbounded' has no timeout" in p for p in problems)


def test_a_broker_without_a_consumer_timeout_needs_no_check():
    assert timeout_problems(make_app().handlers, 0) == []
    assert timeout_problems(make_app().handlers, None) == []


def test_without_a_configured_value_rabbitmqs_default_is_assumed_and_said(caplog):
    caplog.set_level(logging.INFO, logger="rabbitq.worker")
    problems = check_timeouts(make_app().handlers, None)
    assert len(problems) == 2
    messages = [r.getMessage() for r in caplog.records]
    assert f"broker consumer_timeout taken to be {DEFAULT_CONSUMER_TIMEOUT:g}s" in messages[0]
    assert "RABBITQ_CONSUMER_TIMEOUT" in messages[0]
    assert sum(r.levelno == logging.WARNING for r in caplog.records) == 2


def test_a_configured_value_is_used(caplog):
    caplog.set_level(logging.INFO, logger="rabbitq.worker")
    assert check_timeouts(make_app().handlers, 7200) == [
        "handler for 'limits.unbounded' has "
        "no timeout: if it runs past the "
        "broker's consumer_timeout (7200s) "
        "RabbitMQ closes the channel and "
        "redelivers the message"
    ]
    assert "7200s (as configured)" in caplog.records[0].getMessage()


def test_an_ack_timeout_channel_closure_is_explained_in_the_log(caplog):
    reason = Exception(
        "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. "
        "Timeout value used: 1800000 ms."
    )
    on_channel_closed(None, reason)
    assert "not acknowledged within its consumer_timeout" in caplog.records[0].getMessage()


def test_a_normal_channel_close_logs_nothing(caplog):
    on_channel_closed(None, None)
    assert caplog.records == []


def test_a_rate_limited_handler_whose_waits_could_pass_consumer_timeout_is_reported():
    from rabbitq import App, Message
    from rabbitq._worker.consumer_timeout import timeout_problems

    class Slow(Message, type="test.limits.slow-provider"):
        pass

    app = App(queue="limits-waits", prefetch=64, timeout=10)

    @app.handler(Slow, rate_limit="100/h")
    async def slow(msg: Slow) -> None: ...

    # 128 held at 36 s each: 4608 s of waiting, past 1800 s.
    (problem,) = timeout_problems(app.handlers, 1800, held=128)
    assert "limited to 100/h" in problem and "4608s" in problem
    assert timeout_problems(app.handlers, 1800, held=10) == []  # 360 s + 10 s: fine
