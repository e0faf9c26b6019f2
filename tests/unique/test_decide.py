"""The pure parts of unique and debounced publishes: the debounce decision, the checks of
the publish keywords, and the refusals when an app cannot hold keys."""

from __future__ import annotations

import pytest

from rabbitq import App, Message
from rabbitq._amqp.outgoing import KEY_STEPS, require_step
from rabbitq.errors import ConfigurationError
from rabbitq.unique.release import keys_of
from rabbitq.unique.setup import key_store
from rabbitq.unique.steps import check_key, seconds
from rabbitq.unique.store import RUN, SUPERSEDED, WAIT, decide


class Ping(Message, type="test.unique.ping"):
    n: int = 0


def test_the_latest_runs_unless_a_newer_one_is_on_its_way():
    assert decide("m1", False, "m1") == RUN
    assert decide("m1", True, "m1") == WAIT
    assert decide("m2", False, "m1") == SUPERSEDED
    assert decide("m2", True, "m1") == SUPERSEDED
    assert decide(None, False, "m1") == SUPERSEDED  # its burst ran (itself, maybe)


@pytest.mark.parametrize("bad", [0, -1, True, "10", None, float("nan")])
def test_seconds_must_be_positive_numbers(bad):
    with pytest.raises(ConfigurationError, match="unique_for must be positive seconds"):
        seconds("unique_for", bad)
    assert seconds("debounce", 2) == 2.0


@pytest.mark.parametrize("bad", ["", 42, None, "k" * 513])
def test_a_key_is_a_short_nonempty_string(bad):
    with pytest.raises(ConfigurationError, match="unique_key must be a non-empty string"):
        check_key(bad)


def test_an_app_without_a_store_has_no_key_steps_and_says_so_at_publish():
    app = App(queue="q")
    assert app.publish_steps == () and app.delivery_stages == ()
    assert key_store(app.idempotency, None) is None
    with pytest.raises(ConfigurationError, match=r"^unique_for needs a store: App\(backend="):
        require_step(app.publish_steps, "unique", KEY_STEPS["unique"])
    with pytest.raises(ConfigurationError, match=r"^debounce needs App\(debounce=True"):
        require_step(app.publish_steps, "debounce", KEY_STEPS["debounce"])


def test_debounce_needs_a_store_when_the_app_is_built():
    with pytest.raises(ConfigurationError, match=r"^debounce=True needs a store"):
        App(queue="q", debounce=True)


def test_the_headers_name_the_keys():
    assert keys_of({"rabbitq-unique-key": b"capture:1"}) == ("capture:1", None)
    assert keys_of({"rabbitq-debounce-key": "digest:7", "x": 1}) == (None, "digest:7")
    assert keys_of({"rabbitq-unique-key": ""}) == (None, None)


def test_the_new_states_end_a_message_and_show_in_its_history():
    from rabbitq.status.model import Record, fold, history_lines

    superseded = fold("m1", [Record("m1", "received", 1.0, 1), Record("m1", "superseded", 1.1, 1)])
    assert superseded is not None and superseded.state == "superseded" and superseded.final
    detail = {"type": "t", "key": "capture:1", "first": "m0"}
    refused = fold("m2", [Record("m2", "deduplicated", 2.0, None, detail)])
    assert refused is not None and refused.final
    assert "deduplicated" in history_lines(refused)[1]
    assert "key=capture:1 first=m0" in history_lines(refused)[1]


async def test_a_stage_that_skips_is_recorded_as_its_state_not_succeeded():
    from rabbitq.status.model import Record
    from rabbitq.status.recorder import StatusTracing
    from rabbitq.tracing.base import NO_TRACING

    written: list[Record] = []

    class Writer:
        def add(self, record: Record) -> None:
            written.append(record)

    tracing = StatusTracing(Writer(), NO_TRACING)  # type: ignore[arg-type]
    span = tracing.deliver(
        {}, queue="q", type_name="t", routing_key="t", message_id="m", correlation_id=None,
        attempt=1, body_size=2,
    )  # fmt: skip
    span.skipped("superseded")
    span.end("success")
    assert [r.state for r in written] == ["received", "superseded"]


def test_a_record_lost_with_the_store_runs_its_message():
    assert decide(None, False, "m1", lost=True) == RUN
    assert decide("m2", True, "m1", lost=True) == RUN


async def test_a_key_store_that_cannot_be_reached_holds_the_message_without_an_attempt():
    from rabbitq import RetryPolicy
    from rabbitq.effects.store import StoreUnavailable
    from rabbitq.job import add_stage
    from rabbitq.testing import deliver
    from rabbitq.unique.superseded import SupersededStage

    class Down:
        async def check(self, key, message_id, published_in=None):
            raise StoreUnavailable("down")

    app = App(queue="debounce-down", retry=RetryPolicy(delays=(1,)))
    ran: list[int] = []

    @app.handler(Ping)
    async def ping(msg: Ping) -> None:
        ran.append(msg.n)

    app.delivery_stages = add_stage((), SupersededStage(Down()))  # type: ignore[arg-type]
    headers = {"rabbitq-debounce-key": "k"}
    for attempt in (1, 2):  # the last attempt too: held, never exhausted
        result = await deliver(app, Ping(n=1), headers=headers, attempt=attempt)
        assert result.retried and result.deferred and result.next_attempt == attempt
        assert "KeyStoreUnavailable" in (result.error or "")
    assert ran == []
