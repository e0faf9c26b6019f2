"""``rabbitq.__all__`` and the package agree (as httpx's test_exported_members.py)."""

from __future__ import annotations

import inspect
import types

import rabbitq
import rabbitq.errors
import rabbitq.testing

# Imported by rabbitq/__init__.py for its own use, not re-exported.
NOT_EXPORTED = {"version", "PackageNotFoundError", "annotations", "Any", "TYPE_CHECKING"}


def test_every_name_in_all_exists():
    missing = [name for name in rabbitq.__all__ if not hasattr(rabbitq, name)]
    assert missing == []


def test_all_lists_each_name_once_in_sorted_order():
    assert rabbitq.__all__ == sorted(set(rabbitq.__all__))


def test_every_name_imported_into_the_package_is_exported_and_vice_versa():
    # The names are imported on first use (PEP 562: rabbitq --version imports none):
    # the package's table of them is __all__, and once used they are its attributes.
    assert set(rabbitq._FROM) == set(rabbitq.__all__) - {"__version__"}
    for name in rabbitq.__all__:
        getattr(rabbitq, name)
    imported = {
        name
        for name, value in vars(rabbitq).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)  # submodules, set by their import
        and name not in NOT_EXPORTED
    }
    assert imported == set(rabbitq.__all__) - {"__version__"}


def test_every_exported_name_is_defined_in_rabbitq():
    for name in set(rabbitq.__all__) - {"__version__"}:
        module = getattr(rabbitq, name).__module__
        assert module.startswith("rabbitq."), f"{name} comes from {module}"


def test_every_exception_rabbitq_documents_is_exported():
    exceptions = {
        name
        for name, value in vars(rabbitq.errors).items()
        if inspect.isclass(value)
        and issubclass(value, Exception)
        and value.__module__ == "rabbitq.errors"
    }
    assert exceptions <= set(rabbitq.__all__)


def test_every_exported_name_has_a_docstring():
    undocumented = [
        name
        for name in rabbitq.__all__
        if name != "__version__" and not inspect.getdoc(getattr(rabbitq, name))
    ]
    assert undocumented == []


def test_the_version_is_a_string():
    assert isinstance(rabbitq.__version__, str) and rabbitq.__version__


def test_the_testing_helpers_are_exported_from_rabbitq_testing():
    assert rabbitq.testing.__all__ == [
        "FakeDelivery", "Result", "deliver", "deliver_batch", "deliver_sync",
    ]  # fmt: skip
    for name in rabbitq.testing.__all__:
        assert getattr(rabbitq.testing, name).__module__ == "rabbitq.testing"
        assert inspect.getdoc(getattr(rabbitq.testing, name))
