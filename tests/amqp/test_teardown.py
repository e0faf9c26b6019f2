"""What ``topology --delete`` and ``--prune`` decide, as plain data (issue 25, items 1
and 4): a queue with messages or consumers is never deleted unless forced."""

from __future__ import annotations

from rabbitq._amqp.orphans import deletable
from rabbitq._amqp.teardown import STATE_KIND, busy, refusal
from rabbitq._amqp.topology import QueueDepth


def depth(name: str, messages: int = 0, consumers: int = 0, exists: bool = True) -> QueueDepth:
    return QueueDepth(name=name, kind="retry", exists=exists, messages=messages,
                      consumers=consumers)  # fmt: skip


def test_only_an_existing_empty_unused_queue_may_be_pruned():
    assert deletable(depth("q.retry.1s"))
    assert not deletable(depth("q.retry.1s", messages=1))
    assert not deletable(depth("q.retry.1s", consumers=1))
    assert not deletable(depth("q.retry.1s", exists=False))


def test_delete_is_refused_naming_every_queue_that_holds_something():
    queues = [depth("q"), depth("q.dlq", messages=3), depth("q.retry.1s", consumers=2)]
    assert [d.name for d in busy(queues)] == ["q.dlq", "q.retry.1s"]
    why = refusal(queues, force=False)
    assert why.startswith("not deleting anything: q.dlq (3 message(s)), q.retry.1s (2 consumer(s))")
    assert "--force" in why


def test_empty_queues_or_force_mean_no_refusal():
    assert refusal([depth("q"), depth("q.dlq")], force=False) == ""
    assert refusal([depth("q.dlq", messages=3)], force=True) == ""


def test_the_schedules_record_never_refuses_a_delete_but_a_consumer_on_it_does():
    record = QueueDepth(name="q.schedules", kind=STATE_KIND, exists=True, messages=1)
    assert busy([record]) == []
    assert refusal([depth("q"), record], force=False) == ""
    watched = QueueDepth(name="q.schedules", kind=STATE_KIND, exists=True, consumers=1)
    assert busy([watched]) == [watched]
