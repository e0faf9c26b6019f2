"""A TCP proxy in front of the broker (or Redis), so a test can hold a client
disconnected or cut its connections as a network fault would.

aio-pika reconnects at once after a long-lived connection drops, so a state that only
lasts until the reconnect may be over before a test looks. With the proxy refusing new
connections, the worker stays disconnected until the test lets it back in.

The chaos tests' :class:`tests.chaos.proxy.FaultyProxy` does more (stalls a connection
without closing it, counts connections) and stays theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit, urlunsplit


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to the broker of ``url``; see :meth:`refuse`."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._parts = parts
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5672)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.is_cut = False
        self.port = 0

    @property
    def url(self) -> str:
        """``url`` with the proxy as its host and port."""
        userinfo = self._parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@127.0.0.1:{self.port}" if userinfo else f"127.0.0.1:{self.port}"
        return urlunsplit(self._parts._replace(netloc=netloc))

    async def start(self) -> TcpProxy:
        """Listen (on a free port the first time, on the same port after :meth:`refuse`)."""
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def refuse(self) -> None:
        """Stop listening: new connections are refused; open ones go on."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def cut(self) -> None:
        """Drop every connection at once (no FIN: aborted, as a network fault would),
        and any later one as soon as it is accepted."""
        self.is_cut = True
        for writer in list(self._writers):
            writer.transport.abort()

    async def close(self) -> None:
        """Stop listening and cut every connection."""
        self.refuse()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.is_cut:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        if self.is_cut:  # cut while this one was connecting upstream
            self.cut()
            return
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
                await writer.wait_closed()
