"""Synchronous helpers for the console's tests: arrange and inspect a real broker from
test code while the console runs on its own event loop (TestClient's or uvicorn's)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine, Iterable
from datetime import UTC, datetime
from typing import Any

import aio_pika
import orjson

from rabbitq import App
from rabbitq._amqp import headers as h
from rabbitq._amqp.topology import declare

from ..helpers import delete_app_objects


def dead(
    queue: str,
    i: int,
    *,
    type_name: str = "t.a",
    reason: str = "exhausted",
    error: str | None = None,
    failed_at: datetime | None = None,
    body: bytes | None = None,
    traceback: str | None = None,
    message_id: str | None = None,
) -> aio_pika.Message:
    """A DLQ copy as the worker writes it."""
    headers = h.dead_letter_headers(
        {},
        reason=reason,
        error=error or f"ValueError: failure {i}",
        traceback=traceback
        or f'Traceback (most recent call last):\n  File "svc.py", line {i}\nValueError',
        queue=queue,
        attempt=5,
        exchange="rabbitq",
        routing_key=type_name,
        failed_at=failed_at,
    )
    return aio_pika.Message(
        body if body is not None else orjson.dumps({"n": i}),
        headers=headers,
        message_id=message_id or f"m{i:05d}",
        type=type_name,
        content_type="application/json",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        timestamp=datetime(2024, 5, 1, 10, 0, tzinfo=UTC),
    )


async def _declare(url: str, app: App) -> None:
    conn = await aio_pika.connect(url)
    async with conn:
        await declare(await conn.channel(), app.topology())


async def _publish(url: str, routing_key: str, messages: Iterable[aio_pika.Message]) -> None:
    conn = await aio_pika.connect(url)
    async with conn:
        channel = await conn.channel(publisher_confirms=True)
        for m in messages:
            await channel.default_exchange.publish(m, routing_key=routing_key)


async def _depth(url: str, name: str) -> int:
    conn = await aio_pika.connect(url)
    async with conn:
        q = await (await conn.channel()).declare_queue(name, passive=True)
        return q.declaration_result.message_count or 0


async def _take(url: str, name: str) -> list[aio_pika.abc.AbstractIncomingMessage]:
    conn = await aio_pika.connect(url)
    async with conn:
        q = await (await conn.channel()).declare_queue(name, passive=True)
        out = []
        while (m := await q.get(fail=False, no_ack=True)) is not None:
            out.append(m)
        return out


async def _delete(url: str, app: App) -> None:
    conn = await aio_pika.connect_robust(url)
    async with conn:
        await delete_app_objects(conn, app)


def run_async(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` on a fresh loop in another thread (Playwright's sync API keeps a loop
    running in the test's own thread)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def declare_app(url: str, app: App) -> None:
    """Declare ``app``'s topology."""
    run_async(_declare(url, app))


def publish(url: str, routing_key: str, messages: Iterable[aio_pika.Message]) -> None:
    """Publish (confirmed) through the default exchange."""
    run_async(_publish(url, routing_key, list(messages)))


def depth(url: str, name: str) -> int:
    """Messages ready in ``name``."""
    return run_async(_depth(url, name))


def take(url: str, name: str) -> list[Any]:
    """Remove and return everything in ``name``."""
    return run_async(_take(url, name))


def delete_app(url: str, app: App) -> None:
    """Delete ``app``'s queues and exchange."""
    run_async(_delete(url, app))
