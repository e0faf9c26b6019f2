"""Publishing from synchronous code: :class:`SyncPublisher` (``app.sync_publisher()``).

One background thread runs an asyncio loop that owns one async
:class:`~rabbitq._amqp.publisher.Publisher`, kept open between calls. Each blocking
call is a coroutine submitted to that loop with :func:`asyncio.run_coroutine_threadsafe`;
the calling thread waits for its result, so every thread of a web server can share the
one publisher and its one connection.

- Nothing connects until the first call: a publisher made at import time (a Django
  ``AppConfig.ready``, a Flask module, before gunicorn forks its workers) does no I/O.
- A first connect that fails raises to its caller(s) and the next call tries again. A
  call interrupted later (the connection dropped; past ``retry_for`` if given) retires
  the publisher: the next call opens a new one, and the old one is closed once its
  calls in progress have ended. Within ``retry_for``, the robust connection's own
  reconnection carries the calls through.
- ``close()`` refuses new calls, waits for those in progress (each bounded by
  ``timeout`` or ``retry_for``), closes the connection and ends the thread. A call after
  it raises :class:`~rabbitq.errors.PublishInterrupted` (nothing was sent). One that
  is garbage-collected unclosed stops its loop (a finalizer), and its thread closes
  the connection on the way out.
- A call from a thread that runs an event loop raises
  :class:`~rabbitq.errors.ConfigurationError`: it would stall that loop, or deadlock if
  it were the publisher's own; async code uses ``async with app.publisher()``.
- Fork: in a child process the publisher starts afresh at its next call (its own thread
  and connection). The parent's thread does not exist in the child, and its connection
  (the socket is shared with the parent) is never used or closed from the child.

A blocking method is the async publisher's method through :func:`blocking`, so it takes
exactly the same arguments, whatever keywords ``Publisher.publish`` gains; any other
coroutine taking the open publisher first goes through :meth:`SyncPublisher._call`.
``App.sync_publisher`` is ``App.publisher`` through :func:`for_sync_code`: the same
options, typed the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..errors import BrokerUnavailable, ConfigurationError, PublishInterrupted
from .publisher import Publisher

P = ParamSpec("P")
T = TypeVar("T")
A = TypeVar("A")

CLOSED = (
    "nothing was sent: this sync publisher is closed (close() or the end of its with "
    "block); make a new one with app.sync_publisher()"
)


def in_loop_error(name: str) -> str:
    """The one line for a blocking ``name()`` called from a thread running a loop."""
    return (
        f"SyncPublisher.{name}() blocks, and was called from a thread that runs an event "
        f"loop, which it would stall (or deadlock): in async code use "
        f"'async with app.publisher() as pub' and 'await pub.{name}(...)'"
    )


def blocking(
    method: Callable[Concatenate[Publisher, P], Awaitable[T]],
) -> Callable[Concatenate[SyncPublisher, P], T]:
    """``Publisher.method`` as a blocking method of :class:`SyncPublisher`, with the same
    parameters (typed through ``P``): run on the publisher's loop, waited for here."""

    def call(self: SyncPublisher, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._call(method, *args, **kwargs)

    call.__name__ = call.__qualname__ = method.__name__
    call.__doc__ = method.__doc__
    call.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    return call


def for_sync_code(
    publisher: Callable[Concatenate[A, P], Publisher],
) -> Callable[Concatenate[A, P], SyncPublisher]:
    """``App.sync_publisher`` from ``App.publisher``: the same options (typed through
    ``P``, so it keeps up when ``publisher`` gains one), each new async publisher of the
    sync one made by ``publisher(app, **options)``."""

    def sync_publisher(app: A, /, *args: P.args, **kwargs: P.kwargs) -> SyncPublisher:
        return SyncPublisher(functools.partial(publisher, app, *args, **kwargs))

    sync_publisher.__doc__ = f"{publisher.__name__}()'s options, for synchronous code."
    signature = inspect.signature(publisher)  # for help() and editors
    sync_publisher.__signature__ = signature.replace(  # type: ignore[attr-defined]
        return_annotation=SyncPublisher.__name__
    )
    return sync_publisher


class SyncPublisher:
    """A thread-safe, blocking publisher for synchronous code: ``app.sync_publisher()``.

    ``pub.publish(msg, ...)`` takes the arguments of :meth:`rabbitq.Publisher.publish`,
    blocks until the broker confirmed the message and returns its ``message_id``;
    ``pub.publish_many(msgs)`` those of :meth:`rabbitq.Publisher.publish_many`. Make one
    per process and share it between threads; ``close()`` it at exit (or use it as
    ``with app.sync_publisher() as pub``). It connects at the first call and keeps that
    connection; an interrupted call makes the next one open a fresh connection, and a
    forked child starts its own. See docs/control.md.

    ``make`` returns a new, unopened async publisher (``app.sync_publisher()`` passes
    ``app.publisher`` with its options); it is called once here to check them.
    """

    def __init__(self, make: Callable[[], Publisher]) -> None:
        make()  # the options are checked now (no I/O), not at the first publish
        self._make = make
        self._lock = threading.Lock()  # the state below, and the order of submissions
        self._closed = False
        self._pid = os.getpid()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # On the loop only:
        self._publisher: Publisher | None = None
        self._opening: asyncio.Future[Publisher] | None = None
        self._calls: set[asyncio.Task[Any]] = set()
        self._in_use: dict[Publisher, int] = {}  # calls in progress on each publisher
        self._retired: set[Publisher] = set()  # to close once its last call ends
        self._closing: set[asyncio.Task[None]] = set()
        self._opened: set[Publisher] = set()  # open until closed: _serve closes the rest
        self._finalizer: weakref.finalize[..., SyncPublisher] | None = None
        self._inherited: list[object] = []  # a forked parent's state, never touched
        _LIVE.add(self)

    publish = blocking(Publisher.publish)
    """:meth:`rabbitq.Publisher.publish`, blocking: the same arguments (``delay=``,
    ``at=``, ...); returns the ``message_id`` once the broker confirmed it."""

    publish_many = blocking(Publisher.publish_many)
    """:meth:`rabbitq.Publisher.publish_many`, blocking: returns the message ids, in
    order, once every one is confirmed (else :class:`~rabbitq.PartialPublish`)."""

    def __enter__(self) -> SyncPublisher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Refuse new calls, wait for those in progress, close the connection and end
        the thread. A second call waits for the first one to finish; a publisher that
        never published just becomes closed."""
        self._check_pid()
        with self._lock:
            if self._thread is threading.current_thread():
                raise ConfigurationError(in_loop_error("close"))
            first, self._closed = not self._closed, True
            if self._finalizer is not None:
                self._finalizer.detach()
            loop, thread = self._loop, self._thread
            if not first or loop is None or thread is None:
                loop = None  # nothing to shut down here
            else:
                done = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        if loop is not None:
            try:
                done.result()
            finally:
                loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join()

    def _call(
        self,
        fn: Callable[Concatenate[Publisher, P], Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``await fn(publisher, *args, **kwargs)`` on the loop with the open publisher,
        waited for in this thread. Every blocking method is one line over this."""
        name = getattr(fn, "__name__", "call")
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop runs in this thread: blocking is fine
            pass
        else:
            raise ConfigurationError(in_loop_error(name))
        self._check_pid()
        with self._lock:  # a call submitted before close() is waited for by it
            if self._closed:
                raise PublishInterrupted(CLOSED)
            loop = self._started()
            future = asyncio.run_coroutine_threadsafe(self._run(fn, args, kwargs), loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # interrupted here (Ctrl-C): stop the call too; else a no-op
            raise

    def _started(self) -> asyncio.AbstractEventLoop:
        """The loop, its thread started at the first call (under the lock)."""
        if self._loop is None or self._thread is None:
            loop = asyncio.new_event_loop()
            # A daemon: the interpreter does not wait for it before atexit handlers
            # run, so a close() registered with atexit still finds it running.
            thread = threading.Thread(
                target=_serve,
                args=(loop, self._opened),
                name="rabbitq sync publisher",
                daemon=True,
            )
            thread.start()
            self._loop, self._thread = loop, thread
            # Dropped without close(): stop the loop, and _serve closes the connection.
            self._finalizer = weakref.finalize(self, _stop, loop)
            self._finalizer.atexit = False  # at exit the process's end closes it anyway
        return self._loop

    async def _run(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> T:
        task = asyncio.current_task()
        assert task is not None
        self._calls.add(task)
        try:
            publisher = await self._open()
            self._in_use[publisher] = self._in_use.get(publisher, 0) + 1
            try:
                return await fn(publisher, *args, **kwargs)
            except (PublishInterrupted, BrokerUnavailable):
                self._retire(publisher)
                raise
            finally:
                self._release(publisher)
        finally:
            self._calls.discard(task)

    def _retire(self, publisher: Publisher) -> None:
        """After an interrupted call, the next one opens a new publisher (a connection
        that came back, or one that did not, cannot keep failing every call); this one
        is closed once its calls in progress have ended."""
        if self._publisher is publisher:
            self._publisher = None
            self._retired.add(publisher)

    def _release(self, publisher: Publisher) -> None:
        left = self._in_use.pop(publisher) - 1
        if left:
            self._in_use[publisher] = left
        elif publisher in self._retired:
            self._retired.discard(publisher)
            closing = asyncio.ensure_future(_close_quietly(publisher, self._opened))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def _open(self) -> Publisher:
        """The open publisher; the calls that arrive while it opens share one attempt,
        and a failed attempt is made again by the next call."""
        if self._publisher is not None:
            return self._publisher
        if self._opening is None or self._opening.done():
            self._opening = asyncio.ensure_future(self._open_new())
        return await asyncio.shield(self._opening)

    async def _open_new(self) -> Publisher:
        publisher = self._make()
        try:
            await publisher.open()
        except BaseException:
            with contextlib.suppress(Exception):
                await publisher.close()  # whatever open() got to
            raise
        self._publisher = publisher
        self._opened.add(publisher)
        return publisher

    async def _shutdown(self) -> None:
        me = asyncio.current_task()
        calls = [task for task in self._calls if task is not me]
        if calls:
            await asyncio.wait(calls)
        if self._opening is not None and not self._opening.done():
            await asyncio.wait([self._opening])
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            self._opened.discard(publisher)
            await publisher.close()
        if self._closing:
            await asyncio.wait(self._closing)

    def _check_pid(self) -> None:
        """Start afresh in a forked child if the fork hook did not (a fork it missed)."""
        if self._pid != os.getpid():
            self._forget_parent()

    def _forget_parent(self) -> None:
        """In a forked child: the parent's loop thread does not exist here, and its
        connection's socket is shared with the parent, so neither is used or closed
        (kept referenced, so that no finalizer runs on them); the next call starts a
        thread and a connection of the child's own."""
        self._inherited.append(
            (self._loop, self._thread, self._publisher, self._opening)
            + (self._in_use, self._retired, self._closing, self._opened)
        )
        self._lock = threading.Lock()  # another thread may have held it at the fork
        if self._finalizer is not None:  # it would wake the parent's loop
            self._finalizer.detach()
        self._finalizer = None
        self._pid = os.getpid()
        self._loop = self._thread = None
        self._publisher = self._opening = None
        self._calls = set()
        self._in_use, self._retired, self._closing, self._opened = {}, set(), set(), set()


async def _close_quietly(publisher: Publisher, opened: set[Publisher]) -> None:
    """Close a retired publisher; its errors are no one's (its calls have ended)."""
    opened.discard(publisher)
    with contextlib.suppress(Exception):
        await publisher.close()


def _stop(loop: asyncio.AbstractEventLoop) -> None:
    """Stop the loop of a sync publisher that was dropped without ``close()``."""
    with contextlib.suppress(RuntimeError):  # closed already
        loop.call_soon_threadsafe(loop.stop)


def _serve(loop: asyncio.AbstractEventLoop, opened: set[Publisher]) -> None:
    """The publisher's thread: run ``loop`` until ``close()`` (or the publisher's
    finalizer) stops it, close any publisher still open, then the loop."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        try:
            if opened:
                closes = (_close_quietly(p, opened) for p in list(opened))
                loop.run_until_complete(asyncio.gather(*closes))
            leftover = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in leftover:
                task.cancel()
            if leftover:
                loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


_LIVE: weakref.WeakSet[SyncPublisher] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for publisher in list(_LIVE):
        publisher._forget_parent()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
