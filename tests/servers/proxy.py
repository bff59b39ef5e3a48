"""A TCP proxy for fault tests: pass traffic, stall it, or drop every connection.

:class:`FaultProxy` runs an asyncio server on its own thread, listening on a random port
of 127.0.0.1 and forwarding each accepted connection to ``target``. Its mode changes at
any time from the test thread:

* :meth:`pass_traffic` (the start mode): bytes flow both ways.
* :meth:`stall`: connections stay open but no byte is forwarded either way (a hung
  middlebox; the kernel still ACKs, so TCP keepalives and ``tcp_user_timeout`` do not
  notice). New connections are accepted and stalled too.
* :meth:`drop`: every open connection is closed (RST) at once; new connections are
  accepted and closed at once until :meth:`pass_traffic`.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FaultProxy", "fault_proxy"]

_CHUNK = 65536


class FaultProxy:
    """A forwarding proxy to ``target`` (host, port) with pass / stall / drop modes."""

    host = "127.0.0.1"

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.mode = "pass"
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._flowing: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    # ------------------------------------------------------------------ control

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)

    def pass_traffic(self) -> None:
        """Forward again (connections that survived a stall go on where they were)."""
        self._call(self._set_mode, "pass")

    def stall(self) -> None:
        """Stop forwarding in both directions; keep every connection open."""
        self._call(self._set_mode, "stall")

    def drop(self) -> None:
        """Reset every open connection; refuse traffic until :meth:`pass_traffic`."""
        self._call(self._set_mode, "drop")

    def close(self) -> None:
        """Reset every connection, stop listening, end the loop's thread."""
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _call(self, fn: object, *args: object) -> None:
        async def run() -> None:
            fn(*args)  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    # ------------------------------------------------------------------ loop side

    async def _serve(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._handle, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        self._set_mode("drop")
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _set_mode(self, mode: str) -> None:
        assert self._flowing is not None
        self.mode = mode
        if mode == "pass":
            self._flowing.set()
            return
        self._flowing.clear()
        if mode == "drop":
            for w in list(self._writers):
                _reset(w)
            self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.mode == "drop":
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.close()

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        try:
            while True:
                data = await src.read(_CHUNK)
                if not data:
                    break
                await self._flowing.wait()
                if dst.is_closing():
                    break
                dst.write(data)
                await dst.drain()
        finally:
            if not dst.is_closing():
                _reset(dst)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), as a crashed peer or middlebox would."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.close()


@contextmanager
def fault_proxy(host: str, port: int) -> Iterator[FaultProxy]:
    """A started :class:`FaultProxy` to ``host:port``, closed afterwards."""
    proxy = FaultProxy((host, port))
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()
