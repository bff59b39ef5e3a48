"""memory:// shared by several processes, for real-process tests of abilities that only
memory has yet (durable workflows): one ``MemoryStorage`` served by a
``multiprocessing`` manager in a helper process, and :func:`connect`, a storage in each
process that forwards every operation of the protocol and its abilities to it.

A worker SIGKILLed mid-attempt leaves the served storage alive, as a database would:
leases expire and the reaper of another worker recovers the attempt. Only for tests.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.managers import BaseManager
from pathlib import Path
from typing import Any

from queue_core.storage import abilities
from queue_core.storage.protocol import Storage
from tests.servers.ports import free_port

__all__ = ["ENV", "connect", "serve"]

ENV = "QC_MEMPROXY"
"""``host:port:authkey`` of the served storage (read by :func:`connect` in workers)."""

_PROTOCOLS = [Storage] + [
    obj
    for name, obj in vars(abilities).items()
    if name.startswith("Supports") and inspect.isclass(obj)
]
_SERVED: dict[str, Any] = {}


def _storage() -> Any:
    if "storage" not in _SERVED:
        from backends.memory import MemoryStorage

        _SERVED["storage"] = MemoryStorage()
    return _SERVED["storage"]


class _Manager(BaseManager):
    pass


_Manager.register("storage", callable=_storage)


def _methods() -> list[str]:
    """The operations of the protocol and of the abilities memory has (only those: the
    core checks abilities with ``isinstance``)."""
    from backends.memory import MemoryStorage

    names: set[str] = set()
    for proto in _PROTOCOLS:
        if issubclass(MemoryStorage, proto):
            names |= {n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")}
    return sorted(names)


def _forward(name: str) -> Any:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._remote, name)(*args, **kwargs)

    call.__name__ = name
    return call


class ProxyStorage:
    """Every operation of the protocol and of memory's abilities, forwarded."""

    def __init__(self, remote: Any) -> None:
        self._remote = remote

    def close(self) -> None:
        pass  # the served storage outlives its clients


for _name in _methods():
    if _name != "close" and _name != "from_url":
        setattr(ProxyStorage, _name, _forward(_name))


def connect(address: str | None = None) -> ProxyStorage:
    """A storage forwarding to the served one (``address``: :data:`ENV`'s value)."""
    host, port, key = (address or os.environ[ENV]).split(":")
    manager = _Manager(address=(host, int(port)), authkey=key.encode())
    manager.connect()
    # every operation asks for a proxy of its own: one connection per thread of the caller
    return ProxyStorage(manager.storage())  # type: ignore[attr-defined]


@contextmanager
def serve() -> Iterator[str]:
    """Serve a fresh ``MemoryStorage`` from a helper process on a loopback port; yields
    :data:`ENV`'s value, and stops the process at the end."""
    key = os.urandom(8).hex()
    port = free_port()
    root = Path(__file__).resolve().parents[3]
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.helpers.memproxy", str(port), key],
        cwd=root, env=env,
    )  # fmt: skip
    address = f"127.0.0.1:{port}:{key}"
    try:
        end = time.monotonic() + 30
        while True:
            try:
                connect(address)
                break
            except OSError:
                if time.monotonic() > end or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield address
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    _Manager(
        address=("127.0.0.1", int(sys.argv[1])), authkey=sys.argv[2].encode()
    ).get_server().serve_forever()
