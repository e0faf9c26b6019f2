"""Orphaned retry queues, decided without a broker (issue 12, item 7)."""

from __future__ import annotations

from rabbitq._amqp import orphans
from rabbitq._amqp.topology import QueueDepth, plan


def topology(*delays_ms: int):
    return plan(queue="emails", exchange="rabbitq", delays_ms=delays_ms, routing_keys=["e"])


def test_the_candidates_are_common_delays_minus_those_declared_plus_those_named():
    names = orphans.candidates(topology(2000), extra_ms=[7_777])
    assert "emails.retry.1s" in names and "emails.retry.10m" in names
    assert "emails.retry.2s" not in names
    assert "emails.retry.7777ms" in names
    assert all(n.startswith("emails.retry.") for n in names)


def test_the_default_policys_delays_are_always_candidates():
    names = orphans.candidates(topology())
    assert {"emails.retry.1s", "emails.retry.10s", "emails.retry.1m", "emails.retry.10m"} <= set(
        names
    )


def test_only_existing_undeclared_retry_queues_of_this_app_are_orphans():
    depths = [
        QueueDepth(name="emails.retry.1s", kind="retry", exists=True, messages=3),
        QueueDepth(name="emails.retry.2s", kind="retry", exists=True),  # declared
        QueueDepth(name="emails.retry.5s", kind="retry", exists=False),
        QueueDepth(name="other.retry.1s", kind="retry", exists=True),
    ]
    assert [d.name for d in orphans.orphaned(topology(2000), depths)] == ["emails.retry.1s"]


def test_the_warning_names_each_orphan_its_depth_and_the_prune_command():
    found = [
        QueueDepth(name="emails.retry.1s", kind="retry", exists=True, messages=0),
        QueueDepth(name="emails.retry.10m", kind="retry", exists=True, messages=1),
    ]
    text = orphans.warning(topology(2000), found, app_spec="myservice:app")
    assert "emails.retry.1s (0 messages)" in text
    assert "emails.retry.10m (1 message)" in text
    assert "this app's delays: 2s" in text
    assert "the 1 message in them will still come back to 'emails'" in text
    assert "rabbitq topology myservice:app --prune" in text
    assert "\n" not in text


def test_no_orphans_no_warning():
    assert orphans.warning(topology(2000), []) == ""
