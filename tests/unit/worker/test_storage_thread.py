"""StorageThread.call_then: a second call on the same storage-thread wake-up."""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio
import pytest

from queue_core.worker.threads import StorageThread


def test_call_then_runs_after_on_the_thread_and_its_result_on_the_loop() -> None:
    seen: list[tuple[str, str]] = []

    async def main() -> None:
        loop_thread = threading.current_thread().name
        st = StorageThread("qc-test storage")
        recorded = anyio.Event()

        def after() -> Callable[[], None]:
            seen.append(("after", threading.current_thread().name))

            def on_loop() -> None:
                seen.append(("on_loop", threading.current_thread().name))
                recorded.set()

            return on_loop

        value = await st.call_then(after, lambda a, b: a + b, 2, 3)
        assert value == 5
        with anyio.fail_after(5):
            await recorded.wait()
        st.close()
        seen.append(("loop", loop_thread))

    anyio.run(main)
    names = dict(seen)
    assert names["after"] == "qc-test storage"
    assert names["on_loop"] == names["loop"]


def test_call_then_runs_after_when_the_call_raises() -> None:
    ran: list[str] = []

    async def main() -> None:
        st = StorageThread("qc-test storage")
        done = anyio.Event()

        def after() -> Callable[[], None]:
            ran.append("after")
            return done.set

        def boom() -> None:
            raise ValueError("claim failed")

        with pytest.raises(ValueError, match="claim failed"):
            await st.call_then(after, boom)
        with anyio.fail_after(5):
            await done.wait()
        st.close()

    anyio.run(main)
    assert ran == ["after"]
