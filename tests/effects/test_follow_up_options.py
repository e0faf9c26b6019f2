"""ctx.publish's keywords (delay, priority, unique_for): checked when the handler calls
it, in one line, before anything is sent; refused for an outbox row."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from rabbitq import App, DelayError, Message
from rabbitq.effects.followups import publish_options
from rabbitq.effects.guard import OUTBOX_OPTIONS, Effects
from rabbitq.effects.sender import FollowUpSender, check_options, publishing_app
from rabbitq.errors import ConfigurationError
from rabbitq.hooks import Hooks


class Note(Message, type="t.options.note"):
    n: int = 0


def test_only_what_is_set_is_kept_and_bad_values_are_refused():
    assert publish_options(delay=None, priority=0, unique_for=None) == {}
    assert publish_options(delay=2, priority=1, unique_for=5) == {
        "delay": 2,
        "priority": 1,
        "unique_for": 5,
    }
    with pytest.raises(DelayError):
        publish_options(delay=-1, priority=0, unique_for=None)
    with pytest.raises(ConfigurationError, match="priority must be a level from 0"):
        publish_options(delay=None, priority=-1, unique_for=None)
    with pytest.raises(ConfigurationError, match="unique_for must be positive"):
        publish_options(delay=None, priority=0, unique_for=0)


def test_what_the_apps_publisher_refuses_is_refused_at_ctx_publish():
    plain = App(queue="q")
    with pytest.raises(ConfigurationError, match="needs an app with priorities"):
        check_options(plain, {"priority": 1})
    with pytest.raises(ConfigurationError, match="unique_for needs a store"):
        check_options(plain, {"unique_for": 5})
    check_options(App(queue="q", priorities=3), {"priority": 2})  # its lanes: fine


async def test_effects_check_before_buffering_and_outbox_rows_take_no_options():
    checked: list[dict[str, Any]] = []
    effects = Effects(message_id="m", correlation_id=None, key="m", check=checked.append)
    await effects.publish(Note(), priority=1)
    await effects.publish(Note())
    assert checked == [{"priority": 1}]
    assert [f.options for f in effects.follow_ups] == [{"priority": 1}, {}]

    in_outbox = Effects(message_id="m", correlation_id=None, key="m", outbox=object())
    in_outbox._conn = object()  # an open ctx.transaction()
    with pytest.raises(ConfigurationError, match="cannot be an outbox row"):
        await in_outbox.publish(Note(), delay=1)
    assert "ctx.transaction()" in OUTBOX_OPTIONS


def test_a_lanes_worker_publishes_as_the_whole_app():
    app = App(queue="jobs", priorities=2)
    assert publishing_app(app) is app
    view = copy.copy(app)  # as worker.laned's lane_view makes one
    view.lane, view.queue = 1, "jobs.prio.1"
    whole = publishing_app(view)
    assert (whole.lane, whole.queue) == (None, "jobs")
    assert FollowUpSender(view, "amqp://", lambda: None, Hooks()).app.queue == "jobs"
