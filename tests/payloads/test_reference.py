"""The reference a moved body leaves, and the worker's stage around a fake store (no
service): what it fetches, what it checks, when it deletes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from rabbitq import App, Message, RetryPolicy
from rabbitq.payloads.reference import (
    BLOB,
    BLOB_SHA256,
    BLOB_SIZE,
    check_orphan_after,
    new_ref,
    offloads,
    ref_of,
    sweep_after,
)
from rabbitq.payloads.steps import Fetch
from rabbitq.payloads.store import Found, Swept
from rabbitq.testing import deliver


class Doc(Message, type="payloads.doc"):
    text: str


class MemoryBlobs:
    def __init__(self) -> None:
        self.above = 10
        self.orphan_after = timedelta(hours=1)
        self.blobs: dict[str, Found] = {}

    async def put(self, ref, data, sweep_after):  # type: ignore[no-untyped-def]
        self.blobs[ref.id] = Found("pending", data)

    async def renew(self, blob_id: str, sweep_after: datetime) -> None: ...

    async def sent(self, blob_id: str) -> None:
        self.blobs[blob_id] = Found("sent", self.blobs[blob_id].data)

    async def get(self, blob_id: str) -> Found | None:
        return self.blobs.get(blob_id)

    async def done(self, blob_id: str) -> None:
        self.blobs[blob_id] = Found("done", None)

    async def delete(self, blob_ids: list[str]) -> int:
        return sum(self.blobs.pop(i, None) is not None for i in blob_ids)

    async def sweep(self) -> Swept:
        return Swept(0, 0)

    async def close(self) -> None: ...


def test_a_reference_round_trips_and_odd_headers_read_as_none() -> None:
    ref = new_ref(b"hello")
    assert ref_of(ref.headers()) == ref
    assert ref.matches(b"hello") and not ref.matches(b"hellO")
    assert ref_of({BLOB: ref.id.encode(), BLOB_SIZE: 5, BLOB_SHA256: ref.sha256.encode()}) == ref
    for odd in ({}, None, {BLOB: 5}, {BLOB: "x", BLOB_SIZE: "5", BLOB_SHA256: "y"}):
        assert ref_of(odd) is None


def test_sizes_and_orphan_times() -> None:
    assert offloads(11, 10) and not offloads(10, 10)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    hour = timedelta(hours=1)
    assert sweep_after(now, None, None, hour) == now + hour
    assert sweep_after(now, 60, None, hour) == now + hour + timedelta(seconds=60)
    assert sweep_after(now, None, now + 2 * hour, hour) == now + 3 * hour
    assert sweep_after(now, None, now - hour, hour) == now + hour  # a past `at` is now
    assert check_orphan_after(None) == timedelta(hours=24)
    with pytest.raises(Exception, match="orphan_after"):
        check_orphan_after(-1)


def app_with(store: MemoryBlobs, fail: bool = False) -> tuple[App, list[str]]:
    app = App(queue="payloads-unit", large_payloads=store, retry=RetryPolicy(delays=(1,)))
    got: list[str] = []

    @app.handler(Doc)
    async def handle(msg: Doc) -> None:
        got.append(msg.text)
        if fail:
            raise RuntimeError("down")

    return app, got


def moved(store: MemoryBlobs, body: bytes) -> dict[str, object]:
    ref = new_ref(body)
    store.blobs[ref.id] = Found("pending", body)
    return ref.headers()


def test_the_stage_fetches_marks_sent_and_deletes_once_handled() -> None:
    store = MemoryBlobs()
    app, got = app_with(store)
    headers = moved(store, b'{"text":"a long text"}')
    result = asyncio.run(deliver(app, Doc(text="ignored"), headers=headers))
    assert result.acked and got == ["a long text"]
    assert list(store.blobs.values()) == [Found("done", None)]
    again = asyncio.run(deliver(app, Doc(text="ignored"), headers=headers))
    assert again.acked and got == ["a long text"]  # a redelivery: handled before, not run


def test_a_failed_attempt_keeps_the_blob_and_a_missing_one_is_dead_lettered() -> None:
    store = MemoryBlobs()
    app, _ = app_with(store, fail=True)
    headers = moved(store, b'{"text":"x"}')
    result = asyncio.run(deliver(app, Doc(text="ignored"), headers=headers))
    assert result.retried
    assert [f.state for f in store.blobs.values()] == ["sent"]
    store.blobs.clear()
    lost = asyncio.run(deliver(app, Doc(text="ignored"), headers=headers))
    assert lost.dead_lettered and lost.reason == "blob-missing"
    assert "is not in" in (lost.error or "")


def test_the_stage_is_only_in_apps_that_have_a_store() -> None:
    assert App(queue="plain").delivery_stages == ()
    assert App(queue="plain").publish_steps == ()
    app, _ = app_with(MemoryBlobs())
    assert [s.name for s in app.delivery_stages] == ["fetch"]
    assert [s.name for s in app.publish_steps] == ["offload"]
    assert isinstance(app.delivery_stages[0], Fetch)
