"""Large payloads kept out of the broker: a claim check (docs/payloads.md).

``App(large_payloads=PostgresBlobs(dsn, above=256 * 1024))``: a body above ``above``
bytes is stored in the blob store and the message carries its reference; the handler
receives the full message as before. The blob is kept while its message waits (a
delay, a retry, the DLQ), deleted once it is handled or purged from the DLQ, and an
upload whose publish failed is swept (``rabbitq blobs sweep MODULE:APP``).

:class:`PostgresBlobs` needs the ``postgres`` extra, :class:`S3Blobs` the ``s3`` extra;
both are imported lazily, so that ``rabbitq.payloads`` imports without either driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .store import BlobStore, Found, Swept

if TYPE_CHECKING:
    from .postgres import PostgresBlobs
    from .s3 import S3Blobs

__all__ = ["BlobStore", "Found", "PostgresBlobs", "S3Blobs", "Swept"]

_LAZY = {"PostgresBlobs": (".postgres", "postgres"), "S3Blobs": (".s3", "s3")}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'rabbitq.payloads' has no attribute {name!r}")
    import importlib

    module_name, extra = _LAZY[name]
    try:
        module = importlib.import_module(module_name, __name__)
    except ImportError as exc:
        raise ImportError(
            f"rabbitq.payloads.{name} needs the {extra!r} extra: pip install 'rabbitq[{extra}]'",
            name=exc.name,
        ) from exc
    return getattr(module, name)
