"""A TCP proxy on loopback between a worker and the broker, that can fail on purpose.

    proxy = await FaultyProxy.start(node.port)
    url = proxy.url(node.url)     # the same URL, through the proxy
    proxy.cut()                   # close every connection at once (a network fault)
    proxy.stall()                 # stop forwarding on open connections, keep them open
    proxy.resume()                # forward again
    await proxy.close()

A stall models a half-open connection (a dead NAT entry, a frozen peer): bytes stop
flowing but neither side sees a close. New connections made during a stall are
forwarded normally, as a fresh route would be.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

CHUNK = 65536


@dataclass(eq=False)
class _Link:
    writers: list[asyncio.StreamWriter]
    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for writer in self.writers:
            writer.transport.abort()  # no FIN handshake: as abrupt as a network fault


class FaultyProxy:
    """Forwards 127.0.0.1:<port> to 127.0.0.1:<target_port>; see the module docstring."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.accepted = 0
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None

    @classmethod
    async def start(cls, target_port: int) -> FaultyProxy:
        proxy = cls(target_port)
        proxy._server = await asyncio.start_server(proxy._accept, "127.0.0.1", 0)
        proxy.port = proxy._server.sockets[0].getsockname()[1]
        return proxy

    def url(self, broker_url: str) -> str:
        """``broker_url`` with its host and port replaced by the proxy's."""
        parts = urlsplit(broker_url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@127.0.0.1:{self.port}" if userinfo else f"127.0.0.1:{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    @property
    def open_links(self) -> int:
        return len(self._links)

    def cut(self) -> int:
        """Abort every open connection; return how many."""
        links, self._links = self._links, set()
        for link in links:
            link.close()
        return len(links)

    def stall(self) -> None:
        """Stop forwarding on every open connection, without closing it."""
        for link in self._links:
            link.flowing.clear()

    def resume(self) -> None:
        """Forward again on stalled connections."""
        for link in self._links:
            link.flowing.set()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        link = _Link(writers=[writer, up_writer])
        link.flowing.set()
        self._links.add(link)
        link.tasks = [
            asyncio.create_task(self._pump(link, reader, up_writer)),
            asyncio.create_task(self._pump(link, up_reader, writer)),
        ]

    async def _pump(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while data := await reader.read(CHUNK):
                await link.flowing.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            # One side closed: close the other, as a real connection would.
            self._links.discard(link)
            for task in link.tasks:
                if task is not asyncio.current_task():
                    task.cancel()
            for w in link.writers:
                with contextlib.suppress(Exception):
                    w.transport.abort()
