"""The guard around rabbitq._amqp.wire's patch of pamqp's decoder.

The tolerant decoders replace four functions of pamqp (pinned to one major version in
pyproject.toml). If a pamqp release changes one of them, the first test here fails:
read the new function, bring the tolerant one in line with it, and record its hash.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from collections.abc import Iterator

import pytest
from pamqp import decode

from rabbitq._amqp import wire

# sha256 of the source of pamqp's own function of each slot install() replaces
# (pamqp 4.0.1), first 16 hex digits.
PAMQP_FUNCTIONS = {
    "short_str": "6f535b7aaa125aec",
    "timestamp": "64d63c732623d534",
    "field_table": "cd20672a04f9eaa4",
    "field_array": "88d50527b8e73281",
}


@pytest.fixture
def pristine() -> Iterator[None]:
    """pamqp as shipped during the test; the patch as it was afterwards."""
    was = wire.installed()
    wire.uninstall()
    try:
        yield
    finally:
        wire.uninstall()
        if was:
            wire.install()


def _digest(name: str) -> str:
    source = inspect.getsource(getattr(decode, name))
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def test_pamqp_still_has_the_functions_rabbitq_replaces_unchanged():
    assert {name: _digest(name) for name in PAMQP_FUNCTIONS} == PAMQP_FUNCTIONS


def test_install_replaces_every_slot_and_uninstall_restores_pamqps_own(pristine):
    assert wire.install() is True
    assert decode.METHODS["shortstr"] is wire.short_str
    assert decode.TABLE_MAPPING[b"T"] is wire.timestamp
    assert decode.TABLE_MAPPING[b"F"] is wire.field_table
    assert decode.METHODS["array"] is wire.field_array
    assert wire.install() is True  # idempotent
    wire.uninstall()
    assert not wire.installed()
    assert decode.METHODS["shortstr"] is decode.short_str
    assert decode.METHODS["timestamp"] is decode.timestamp
    assert decode.TABLE_MAPPING[b"F"] is decode.field_table
    assert decode.TABLE_MAPPING[b"A"] is decode.field_array


def test_install_leaves_pamqp_alone_and_logs_once_when_a_slot_is_not_pamqps(
    pristine, monkeypatch, caplog
):
    def someone_elses(value: bytes) -> tuple[int, str]:
        return 1, ""

    monkeypatch.setitem(decode.METHODS, "shortstr", someone_elses)
    monkeypatch.setattr(wire, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="rabbitq.connection"):
        assert wire.install() is False
        assert wire.install() is False
    assert wire.foreign_slots() == ["METHODS['shortstr']"]
    assert decode.METHODS["shortstr"] is someone_elses
    assert decode.TABLE_MAPPING[b"T"] is decode.timestamp  # nothing else replaced either
    warnings = [r for r in caplog.records if "not installing" in r.getMessage()]
    assert len(warnings) == 1 and "METHODS['shortstr']" in warnings[0].getMessage()
