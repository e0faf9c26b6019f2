"""S3Blobs against an S3-compatible server: moto's, run in this process on a free
loopback port (no S3 server installs on this kind of machine from its registries:
MinIO and Ceph ship neither Debian nor PyPI packages)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rabbitq import App, Worker
from rabbitq.payloads import S3Blobs
from rabbitq.payloads.reference import new_ref

from ..broker_node import free_port
from ..helpers import running, wait_for
from .test_large_payloads import Report, big
from .test_sweep_lease import renewal_keeps_the_blob

pytestmark = pytest.mark.services

boto3 = pytest.importorskip("boto3", reason="pip install 'rabbitq[s3]' runs the S3 tests")
moto_server = pytest.importorskip("moto.server", reason="pip install 'moto[server]'")


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
async def s3(s3_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[S3Blobs]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    bucket = f"rabbitq-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=s3_url)
    client.create_bucket(Bucket=bucket)
    yield S3Blobs(bucket, above=64 * 1024, client=client, orphan_after=0)


def keys(store: S3Blobs) -> list[str]:
    answer = store.client.list_objects_v2(Bucket=store.bucket, Prefix=store.prefix)
    return sorted(item["Key"].removeprefix(store.prefix) for item in answer.get("Contents", []))


async def test_the_blob_states_in_s3(s3: S3Blobs) -> None:
    data = b"x" * 100_000
    ref = new_ref(data)
    await s3.put(ref, data, datetime.now(UTC) + timedelta(hours=1))
    found = await s3.get(ref.id)
    assert found is not None and (found.state, found.data) == ("pending", data)
    await s3.sent(ref.id)
    found = await s3.get(ref.id)
    assert found is not None and found.state == "sent"
    await s3.done(ref.id)
    found = await s3.get(ref.id)
    assert found is not None and (found.state, found.data) == ("done", None)
    assert keys(s3) == [ref.id + ".done"]
    assert await s3.get("nothing") is None
    orphan = new_ref(b"y" * 10)
    await s3.put(orphan, b"y" * 10, datetime.now(UTC) - timedelta(seconds=1))
    swept = await s3.sweep()
    assert (swept.orphans, swept.tombstones) == (1, 0)
    assert keys(s3) == [ref.id + ".done"]
    assert await s3.delete([ref.id]) == 0


async def test_a_renewed_lease_keeps_a_pending_blob_from_the_sweep_in_s3(s3: S3Blobs) -> None:
    await renewal_keeps_the_blob(s3)


async def test_a_worker_handles_a_large_payload_from_s3(
    make_app: Callable[..., App], s3: S3Blobs, connection: Any
) -> None:
    app = make_app(large_payloads=s3, max_body_size=None)
    content = big(2 * 1024 * 1024)
    got: list[str] = []

    @app.handler(Report)
    async def handle(msg: Report) -> None:
        got.append(msg.content)

    async with running(Worker(app)):
        async with app.publisher() as pub:
            await pub.publish(Report(name="s3", content=content))
        await wait_for(lambda: got == [content], timeout=60)
        await wait_for(lambda: [k[-5:] for k in keys(s3)] == [".done"], timeout=30)
