"""The pytest plugin of queue-core (entry point ``pytest11``: loaded by pytest wherever
queue-core is installed).

Fixture ``queue_core_eager``: for the duration of one test, every
:class:`~queue_core.Queue` -- those your application built at import time included --
runs its jobs eagerly: ``.delay()`` / ``.apply()`` / ``.map()`` return after the job
has ended, through the worker's classification, retry (delays recorded, not slept),
timeout and dead-letter path, with attempt records of ``mode="eager"``. Queues built
during the test see env ``QUEUE_CORE_EAGER=1`` as well. See docs/guides/testing.md.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

__all__ = ["queue_core_eager"]


@pytest.fixture
def queue_core_eager(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run every Queue's jobs eagerly during this test (no worker needed)."""
    import queue_core.queue

    monkeypatch.setenv("QUEUE_CORE_EAGER", "1")
    monkeypatch.setattr(queue_core.queue, "EAGER_EVERYWHERE", True)
    yield
