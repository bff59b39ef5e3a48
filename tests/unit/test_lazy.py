"""queue_core.storage.lazy.Lazy: built once per instance, on first access, by one thread."""

from __future__ import annotations

import threading
import time

from queue_core.storage.lazy import Lazy


def _part(owner: Owner) -> list[str]:
    owner.builds += 1
    time.sleep(0.01)  # widen the window two threads could both build in
    return [owner.name]


class Owner:
    part = Lazy(_part)

    def __init__(self, name: str) -> None:
        self.name = name
        self.builds = 0


def test_built_on_first_access_once_per_instance() -> None:
    a, b = Owner("a"), Owner("b")
    assert a.builds == 0  # nothing built at construction
    assert a.part == ["a"] and a.part is a.part
    assert b.part == ["b"]
    assert (a.builds, b.builds) == (1, 1)
    assert isinstance(Owner.part, Lazy)


def test_two_threads_never_build_two_parts() -> None:
    owner = Owner("x")
    barrier = threading.Barrier(8)
    seen: list[list[str]] = []

    def read() -> None:
        barrier.wait()
        seen.append(owner.part)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert owner.builds == 1
    assert all(s is seen[0] for s in seen)
