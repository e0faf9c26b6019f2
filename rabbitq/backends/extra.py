"""The one check a backend makes of its driver at construction: installed, or the
``pip install 'rabbitq[EXTRA]'`` hint (the stores import their driver only when made)."""

from __future__ import annotations

import importlib.util


def require(extra: str, modules: tuple[str, ...], what: str) -> None:
    """Raise ImportError with the install hint unless every one of ``modules`` (the
    ``extra``'s drivers) can be imported."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"{what} needs the {extra!r} extra (not installed: {', '.join(missing)}): "
            f"pip install 'rabbitq[{extra}]'"
        )
