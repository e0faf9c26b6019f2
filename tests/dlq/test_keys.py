"""DeadMessage.key and Filters.keys: selecting exactly the copies a person was shown."""

from __future__ import annotations

from dataclasses import replace

from rabbitq.dlq import DeadMessage, Filters


def message(**headers: object) -> DeadMessage:
    return DeadMessage(
        dlq="q.dlq",
        body=b'{"n": 1}',
        properties={"message_id": "m1", "type": "t"},
        headers={"rabbitq-failed-at": "2024-05-01T10:00:00+00:00", **headers},
    )


def test_a_key_ignores_what_reading_changes_but_not_a_new_failure():
    m = message()
    assert m.key == replace(m, redelivered=True).key
    assert m.key == message(**{"x-delivery-count": 3}).key
    assert m.key != message(**{"rabbitq-failed-at": "2024-05-02T10:00:00+00:00"}).key
    assert m.key != replace(m, body=b'{"n": 2}').key
    assert len(m.key) == 24


def test_filters_by_keys_select_exactly_those_copies():
    a, b = message(), message(**{"rabbitq-failed-at": "2024-05-02T10:00:00+00:00"})
    f = Filters.build(keys=[a.key])
    assert f.active and f.matches(a) and not f.matches(b)
    assert "1 copies shown" in f.describe()
    assert Filters().matches(b)
