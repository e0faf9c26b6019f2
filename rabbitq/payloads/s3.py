"""Large payloads in an S3-compatible object store: :class:`S3Blobs` (the ``s3``
extra: boto3, its calls run in a thread).

One object per blob, ``<prefix><id>``; its state (pending or sent) and when it becomes
an orphan are object tags, so that marking it sent rewrites no data. A handled blob's
object is deleted and an empty ``<prefix><id>.done`` tombstone is written in its place.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlencode

from ..errors import ConfigurationError
from .reference import TOMBSTONE_FOR, BlobRef, check_orphan_after
from .store import Found, Swept

DEFAULT_ABOVE = 256 * 1024
STATE, SWEEP_AFTER = "rabbitq-state", "rabbitq-sweep-after"
DONE_SUFFIX = ".done"
T = TypeVar("T")


class S3Blobs:
    """Keeps bodies above ``above`` bytes (default 256 KiB) as objects ``<prefix><id>``
    in ``bucket`` (which must exist). ``client``: a boto3 S3 client (default: one from
    ``endpoint_url`` and the usual AWS environment and files). ``orphan_after`` as for
    :class:`~rabbitq.payloads.PostgresBlobs`."""

    def __init__(
        self,
        bucket: str,
        *,
        above: int = DEFAULT_ABOVE,
        prefix: str = "rabbitq-blobs/",
        endpoint_url: str | None = None,
        client: Any = None,
        orphan_after: float | timedelta | None = None,
    ) -> None:
        if not bucket:
            raise ConfigurationError("S3Blobs needs a bucket name")
        if not isinstance(above, int) or above < 0:
            raise ConfigurationError(f"above must be a size in bytes, not {above!r}")
        self.bucket, self.prefix, self.above = bucket, prefix, above
        self.orphan_after = check_orphan_after(orphan_after)
        self._endpoint_url = endpoint_url
        self._client = client

    def __repr__(self) -> str:
        return f"S3Blobs({self.bucket!r}, prefix={self.prefix!r}, above={self.above})"

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3  # type: ignore[import-untyped]  # the s3 extra, imported lazily

            self._client = boto3.client("s3", endpoint_url=self._endpoint_url)
        return self._client

    async def _call(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        return await asyncio.to_thread(functools.partial(fn, **kwargs))

    async def put(self, ref: BlobRef, data: bytes, sweep_after: datetime) -> None:
        tags = urlencode({STATE: "pending", SWEEP_AFTER: str(int(sweep_after.timestamp()))})
        await self._call(
            self.client.put_object, Bucket=self.bucket, Key=self.prefix + ref.id, Body=data,
            Tagging=tags,
        )  # fmt: skip

    async def renew(self, blob_id: str, sweep_after: datetime) -> None:
        key = self.prefix + blob_id
        tags = await self._tags(key)
        if tags.get(STATE, "pending") != "pending":
            return
        until = max(int(sweep_after.timestamp()), int(float(tags.get(SWEEP_AFTER, "0"))))
        await self._call(
            self.client.put_object_tagging, Bucket=self.bucket, Key=key,
            Tagging={"TagSet": [{"Key": STATE, "Value": "pending"},
                                {"Key": SWEEP_AFTER, "Value": str(until)}]},
        )  # fmt: skip

    async def sent(self, blob_id: str) -> None:
        await self._call(
            self.client.put_object_tagging, Bucket=self.bucket, Key=self.prefix + blob_id,
            Tagging={"TagSet": [{"Key": STATE, "Value": "sent"}]},
        )  # fmt: skip

    async def get(self, blob_id: str) -> Found | None:
        key = self.prefix + blob_id
        try:
            answer = await self._call(self.client.get_object, Bucket=self.bucket, Key=key)
            data = await asyncio.to_thread(answer["Body"].read)
            tags = await self._tags(key)
        except self.client.exceptions.NoSuchKey:
            return Found("done", None) if await self._exists(key + DONE_SUFFIX) else None
        return Found("sent" if tags.get(STATE) == "sent" else "pending", data)

    async def done(self, blob_id: str) -> None:
        key = self.prefix + blob_id
        until = datetime.now(UTC) + TOMBSTONE_FOR
        tags = urlencode({STATE: "done", SWEEP_AFTER: str(int(until.timestamp()))})
        await self._call(
            self.client.put_object, Bucket=self.bucket, Key=key + DONE_SUFFIX, Body=b"",
            Tagging=tags,
        )  # fmt: skip
        await self._call(self.client.delete_object, Bucket=self.bucket, Key=key)

    async def delete(self, blob_ids: list[str]) -> int:
        found = 0
        for blob_id in blob_ids:
            key = self.prefix + blob_id
            if await self._exists(key):
                found += 1
                await self._call(self.client.delete_object, Bucket=self.bucket, Key=key)
        return found

    async def sweep(self) -> Swept:
        """List every object under the prefix and read its tags: a sweep costs a request
        per blob (run it hourly, not per message)."""
        now = datetime.now(UTC).timestamp()
        orphans = tombstones = 0
        paginator = self.client.get_paginator("list_objects_v2")
        pages = await asyncio.to_thread(
            lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=self.prefix))
        )
        for page in pages:
            for item in page.get("Contents", []):
                key = item["Key"]
                tags = await self._tags(key)
                if tags.get(STATE) == "sent" or float(tags.get(SWEEP_AFTER, "inf")) >= now:
                    continue
                await self._call(self.client.delete_object, Bucket=self.bucket, Key=key)
                if key.endswith(DONE_SUFFIX):
                    tombstones += 1
                else:
                    orphans += 1
        return Swept(orphans=orphans, tombstones=tombstones)

    async def close(self) -> None:
        return None

    async def _tags(self, key: str) -> dict[str, str]:
        answer = await self._call(self.client.get_object_tagging, Bucket=self.bucket, Key=key)
        return {t["Key"]: t["Value"] for t in answer.get("TagSet", [])}

    async def _exists(self, key: str) -> bool:
        try:
            await self._call(self.client.head_object, Bucket=self.bucket, Key=key)
        except self.client.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True
