""":func:`load_app`: the :class:`~rabbitq.App` a ``MODULE:APP`` string names, as the CLI
and the supervisor find a service's app. An import that fails is one line naming the
file and line of the user's code where it failed (:func:`where`); the CLI prints the
whole traceback on ``--traceback`` or ``$RABBITQ_TRACEBACK`` (rabbitq.cli.common)."""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
import traceback
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
            f"importing {module_name!r} failed{where(exc)}: {exc}{install_hint(exc.name)}"
            f"{_MORE}"
        ) from exc
    except Exception as exc:
        text = exc.msg if isinstance(exc, SyntaxError) and exc.msg else str(exc)
        raise AppLoadError(
            f"importing {module_name!r} failed{where(exc)}: {type(exc).__name__}: {text}{_MORE}"
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


_MORE = " (RABBITQ_TRACEBACK=1 prints the traceback)"
# Python's own files, the installed packages' and rabbitq's: not the user's code.
_NOT_USERS = tuple(
    os.path.realpath(p) + os.sep
    for p in {
        *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
        os.path.dirname(os.path.abspath(__file__)),
    }
)


def where(exc: BaseException) -> str:
    """``" at path:line"``: where in the user's code ``exc`` arose (a SyntaxError's own
    place; else the last frame of the traceback outside Python's, the installed packages'
    and rabbitq's files); the path relative to the current directory when under it;
    ``""`` if no frame is the user's."""
    place: tuple[str, int] | None = None
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        place = (exc.filename, exc.lineno)
    else:
        for frame, line in traceback.walk_tb(exc.__traceback__):
            path = frame.f_code.co_filename
            if not path.startswith("<") and not os.path.realpath(path).startswith(_NOT_USERS):
                place = (path, line)
    if place is None:
        return ""
    path = os.path.abspath(place[0])
    relative = os.path.relpath(path)
    return f" at {path if relative.startswith('..') else relative}:{place[1]}"
