"""Which optional extra (``pip install 'rabbitq[EXTRA]'``) provides which module, so
that a missing one is said in one line that names the extra (pure)."""

from __future__ import annotations

EXTRAS: dict[str, str] = {
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "redis": "redis",
    "opentelemetry": "otel",
    "starlette": "console",
    "uvicorn": "console",
    "jinja2": "console",
    "multipart": "console",
    "python_multipart": "console",
    "uvloop": "uvloop",
}
"""Top-level module name -> the extra that installs it."""


def extra_for(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name is looked up by its top
    package), or None if no extra does."""
    if not module:
        return None
    return EXTRAS.get(module.split(".", 1)[0])


def install_hint(module: str | None) -> str:
    """`` (pip install 'rabbitq[postgres]')`` for a module an extra installs, else ""."""
    extra = extra_for(module)
    return f" (pip install 'rabbitq[{extra}]')" if extra else ""


def missing(what: str, exc: ImportError) -> str:
    """One line: ``what`` needs an extra that is not installed, and how to install it."""
    extra = extra_for(exc.name)
    if extra is None:
        return f"{what} cannot import {exc.name or 'a module'}: {exc}"
    return f"{what} needs the {extra!r} extra: pip install 'rabbitq[{extra}]' ({exc.name} missing)"
