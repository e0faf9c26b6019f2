"""``rabbitq demo``'s scripted batch and its expected tally, without a broker."""

from __future__ import annotations

from rabbitq import demo
from rabbitq.testing import deliver

EXPECTED = {
    "published": 24,
    "handled": 19,
    "retried": {"1s": 5, "3s": 3},
    "dead_lettered": {"exhausted": 2, "permanent": 1, "invalid": 1, "unknown-type": 1},
}


def test_the_default_batch_expects_exact_counts():
    assert demo.expected_counts(demo.plan_batch()).as_dict() == EXPECTED


def test_the_count_option_only_changes_the_ordinary_messages():
    counts = demo.expected_counts(demo.plan_batch(0)).as_dict()
    assert counts["published"] == 8
    assert counts["handled"] == 3
    assert counts["retried"] == EXPECTED["retried"]
    assert counts["dead_lettered"] == EXPECTED["dead_lettered"]


def test_message_ids_of_the_batch_are_unique():
    ids = [p.message_id for p in demo.plan_batch(40)]
    assert len(ids) == len(set(ids))


async def test_each_planned_message_meets_the_fate_its_plan_says():
    """The handlers, run as the worker runs them, do what the plan promises."""
    app = demo.build_app(work_time=0)
    for item in demo.plan_batch(4):
        body = item.message if item.message is not None else item.raw
        tiers: list[str] = []
        attempt = 1
        while True:
            result = await deliver(app, body, type=item.type_name, attempt=attempt)
            if not result.retried:
                break
            assert result.delay is not None
            tiers.append(result.delay)
            attempt += 1
        assert tuple(tiers) == item.retries, item.message_id
        final = "handled" if result.acked else result.reason
        assert final == item.final, item.message_id
