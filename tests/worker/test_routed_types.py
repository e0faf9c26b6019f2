"""Which deliveries are refused as routed by one type's binding but naming another
(:func:`rabbitq._worker.dispatch.routed_as_another`, pure; issue 33, item 6)."""

from __future__ import annotations

from types import SimpleNamespace

from rabbitq._worker.dispatch import routed_as_another

HANDLED = {"a.capture": object(), "a.refund": object()}


def delivery(type_name: str | None, routing_key: str) -> SimpleNamespace:
    return SimpleNamespace(type=type_name, routing_key=routing_key)


def test_a_delivery_routed_by_one_bound_type_and_naming_another_is_refused():
    assert routed_as_another(delivery("a.refund", "a.capture"), HANDLED)
    assert routed_as_another(delivery("x.unknown", "a.capture"), HANDLED)


def test_rabbitqs_own_routes_are_not_refused():
    assert not routed_as_another(delivery("a.capture", "a.capture"), HANDLED)  # published
    assert not routed_as_another(delivery(None, "a.capture"), HANDLED)  # typed by its key
    assert not routed_as_another(delivery("a.refund", "emails"), HANDLED)  # retry, replay
    assert not routed_as_another(delivery("a.refund", "0.1.0.0"), HANDLED)  # delay ladder
