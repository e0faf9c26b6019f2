"""An app declares exactly the retry delays that some handler uses (issue 12, item 8)."""

from __future__ import annotations

from rabbitq import App, Message, RetryPolicy


class Capture(Message, type="t.delays.capture"):
    n: int


class Refund(Message, type="t.delays.refund"):
    n: int


def labels(app: App) -> list[str]:
    return [q.name.rpartition(".")[2] for q in app.topology().retries]


def test_the_apps_default_policy_declares_nothing_when_every_handler_has_its_own():
    app = App(queue="payments")

    @app.handler(Capture, retry=RetryPolicy(delays=(5, 30)))
    async def capture(msg: Capture) -> None: ...

    @app.handler(Refund, retry=RetryPolicy(delays=(30,)))
    async def refund(msg: Refund) -> None: ...

    assert labels(app) == ["5s", "30s"]


def test_a_handler_without_its_own_policy_uses_the_apps_delays():
    app = App(queue="emails", retry=RetryPolicy(delays=(2, 20)))

    @app.handler(Capture)
    async def capture(msg: Capture) -> None: ...

    @app.handler(Refund, retry=RetryPolicy(delays=(7,)))
    async def refund(msg: Refund) -> None: ...

    assert labels(app) == ["2s", "7s", "20s"]


def test_an_app_without_handlers_declares_no_retry_queue():
    assert labels(App(queue="nothing-yet")) == []


def test_the_payment_example_declares_no_unused_retry_queue():
    from examples.payment_service import app

    used = {ms for h in app.handlers.values() for ms in h.retry.delays_ms}
    assert {q.ttl_ms for q in app.topology().retries} == used
