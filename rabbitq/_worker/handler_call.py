"""Calling one handler: async on the loop, sync on a thread of the
:class:`~rabbitq._worker.handler_pool.HandlerPool`, within the handler's timeout."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Coroutine
from concurrent.futures import Executor
from typing import Any

from ..context import Context
from ..errors import HandlerNotStarted, HandlerTimeout
from ..handler import Handler
from .handler_pool import Expired, HandlerPool, NotStarted


async def call_handler(
    handler: Handler, message: Any, ctx: Context, executor: Executor | HandlerPool | None
) -> Any:
    """Run ``handler`` on ``message`` and return what it returned; past its timeout raise
    :class:`HandlerTimeout`."""
    if handler.is_async:  # the common case, one coroutine less to create and resume
        args = (message, ctx) if handler.wants_context else (message,)
        if handler.timeout is None:
            return await handler.fn(*args)
        return await _call_within(handler.timeout, handler.fn(*args))
    # A sync handler on a HandlerPool: the pool applies the timeout from its start.
    if handler.timeout is None or isinstance(executor, HandlerPool):
        return await _call(handler, message, ctx, executor)
    return await _call_within(handler.timeout, _call(handler, message, ctx, executor))


async def _call(
    handler: Handler, message: Any, ctx: Context, executor: Executor | HandlerPool | None
) -> Any:
    args = (message, ctx) if handler.wants_context else (message,)
    if handler.is_async:
        return await handler.fn(*args)
    elif isinstance(executor, HandlerPool):
        # The pool applies the timeout from the moment the handler starts, and keeps
        # threads free for other handlers when one hangs (see handler_pool).
        try:
            return await executor.run(
                functools.partial(handler.fn, *args), timeout=handler.timeout, name=ctx.type
            )
        except Expired as exc:
            raise HandlerTimeout(str(exc)) from None
        except NotStarted as exc:
            raise HandlerNotStarted(str(exc)) from None
    else:
        loop = asyncio.get_running_loop()
        # A sync handler that outlives its timeout cannot be stopped: its thread runs
        # on, but the message is settled as failed and the slot is freed. The thread runs
        # in a copy of this context, so a tracing span current here is current there too.
        run = contextvars.copy_context().run
        return await loop.run_in_executor(executor, functools.partial(run, handler.fn, *args))


class _Expiry:
    """Cancels the task when called (by the loop's timer) and remembers that it did."""

    __slots__ = ("expired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.expired = False

    def __call__(self) -> None:
        self.expired = True
        self.task.cancel()


async def _call_within(timeout: float, call: Coroutine[Any, Any, Any]) -> Any:
    """Await ``call``; past ``timeout`` seconds cancel it and raise HandlerTimeout.

    What ``asyncio.timeout`` does, for a fraction of its cost per message: one timer
    handle, no context manager. A cancellation that is not ours (shutdown) propagates.
    """
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    cancelling = task.cancelling()
    expiry = _Expiry(task)
    timer = loop.call_at(loop.time() + timeout, expiry)
    try:
        result = await call
    except asyncio.CancelledError:
        if expiry.expired and task.uncancel() <= cancelling:
            raise HandlerTimeout(f"handler exceeded its timeout of {timeout:g}s") from None
        raise
    else:
        if expiry.expired:  # the handler swallowed our cancellation and returned
            task.uncancel()
        return result
    finally:
        timer.cancel()
