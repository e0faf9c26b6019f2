""":func:`load_app`: the :class:`~rabbitq.App` a ``MODULE:APP`` string names, as the CLI
and the supervisor find a service's app."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from .app import App
from .errors import AppLoadError, install_hint


def load_app(spec: str) -> App:
    """Import ``module.path:attribute`` and return the :class:`App` it names.

    The current directory is importable, as with ``python -m``, so that
    ``rabbitq worker myservice:app`` works from a project's root.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AppLoadError(f"expected MODULE:APP (for example 'myservice.tasks:app'), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # The module itself (or its package) is missing, not something it imports.
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise AppLoadError(
                f"cannot import module {module_name!r}: no such module "
                f"(run from the project's root or fix PYTHONPATH)"
            ) from exc
        raise AppLoadError(
            f"importing {module_name!r} failed: {exc}{install_hint(exc.name)}"
        ) from exc
    except Exception as exc:
        raise AppLoadError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AppLoadError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, App):
        raise AppLoadError(f"{spec!r} is a {type(obj).__name__}, not a rabbitq.App")
    obj.loaded_as = spec  # so that messages can name the app as the user does
    return obj
