"""Typed messages and the type-name registry."""

from __future__ import annotations

import pydantic
import pytest

from rabbitq import ConfigurationError, Message
from rabbitq.message import lookup, validate_type_name


class Ping(Message, type="unit.message.ping"):
    n: int = 0


def test_a_message_knows_its_type_name():
    assert Ping.type_name() == "unit.message.ping"
    assert Ping(n=1).type_name() == "unit.message.ping"


def test_a_defined_message_can_be_looked_up_by_its_type_name():
    assert lookup("unit.message.ping") is Ping
    assert lookup("unit.message.never-defined") is None


def test_a_message_is_immutable():
    with pytest.raises(pydantic.ValidationError):
        Ping(n=1).n = 2


def test_a_message_is_validated_on_construction():
    with pytest.raises(pydantic.ValidationError):
        Ping(n="many")  # type: ignore[arg-type]


def test_a_message_without_a_type_has_no_type_name():
    class Untyped(Message):
        x: int

    with pytest.raises(ConfigurationError, match=r"Untyped has no message type.*type='\.\.\.'"):
        Untyped.type_name()
    with pytest.raises(ConfigurationError):
        Untyped(x=1).type_name()


def test_an_untyped_base_class_can_be_shared_by_typed_messages():
    class Event(Message):
        source: str = "unit"

    class Created(Event, type="unit.message.created"):
        pass

    class Deleted(Event, type="unit.message.deleted"):
        pass

    assert Created.type_name() == "unit.message.created"
    assert Deleted.type_name() == "unit.message.deleted"
    assert Created().source == "unit"


def test_a_subclass_without_a_type_inherits_its_parents_name_without_claiming_it():
    class Parent(Message, type="unit.message.parent"):
        a: int = 1

    class Child(Parent):
        b: int = 2

    assert Child.type_name() == "unit.message.parent"
    assert lookup("unit.message.parent") is Parent


def test_two_different_models_cannot_share_a_type_name():
    class First(Message, type="unit.message.shared"):
        pass

    with pytest.raises(ConfigurationError, match="already defined by") as info:

        class Second(Message, type="unit.message.shared"):
            pass

    assert "First" in str(info.value)
    assert "Second" in str(info.value)
    assert lookup("unit.message.shared") is First


def test_the_same_class_defined_again_by_a_reimport_replaces_itself():
    def define() -> type[Message]:
        class Reloaded(Message, type="unit.message.reloaded"):
            pass

        return Reloaded

    first = define()
    second = define()  # same module and qualified name, as importlib.reload makes it
    assert first is not second
    assert lookup("unit.message.reloaded") is second


@pytest.mark.parametrize(
    "name",
    [
        "email",
        "email.send",
        "Email.Send_v2",
        "a-b.c_d.0",
        "x" * 255,
    ],
)
def test_valid_type_names_are_accepted(name):
    assert validate_type_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "email.",
        ".email",
        "email..send",
        "email.*",
        "email.#",
        "#",
        "email send",
        "email/send",
        "émail.send",
        "email.send\n",
        "\nemail.send",
        "x" * 256,
        None,
        42,
        b"email.send",
    ],
)
def test_invalid_type_names_are_rejected(name):
    with pytest.raises(ConfigurationError, match="invalid message type name"):
        validate_type_name(name)


def test_a_message_with_an_invalid_type_name_cannot_be_defined():
    with pytest.raises(ConfigurationError, match="invalid message type name 'orders.#'"):

        class Wildcard(Message, type="orders.#"):
            pass

    assert lookup("orders.#") is None
