"""The pytest plugin of queue-core (entry point ``pytest11``: loaded by pytest wherever
queue-core is installed).

Fixture ``queue_core_eager``: for the duration of one test, every
:class:`~queue_core.Queue` -- those your application built at import time included --
runs its jobs eagerly: ``.delay()`` / ``.apply()`` / ``.map()`` return after the job
has ended, through the worker's classification, retry (delays recorded, not slept),
timeout and dead-letter path, with attempt records of ``mode="eager"``. Queues built
during the test see env ``QUEUE_CORE_EAGER=1`` as well. When env ``QUEUE_CORE_URL`` is
unset, the test runs on ``memory://`` rather than the embedded default
``./queue_core.db``: queues built on that default get a fresh in-process storage for the
test, and queues built during it see ``QUEUE_CORE_URL=memory://``; so nothing is
written to the working directory and no test sees another's jobs. See
docs/guides/testing.md.

Loading this plugin imports :mod:`queue_core.testing`, which has pytest rewrite the
asserts of the published contract suite before importing it, so a failing contract test
shows the values it compared (whether pytest loaded the plugin by its entry point, by
``-p`` or through ``pytest_plugins``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

__all__ = ["queue_core_eager"]


@pytest.fixture
def queue_core_eager(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run every Queue's jobs eagerly during this test (no worker needed), on
    ``memory://`` unless env ``QUEUE_CORE_URL`` names a storage."""
    import os

    import queue_core.queue
    from queue_core.app.config import ENV_URL, open_storage

    monkeypatch.setenv("QUEUE_CORE_EAGER", "1")
    monkeypatch.setattr(queue_core.queue, "EAGER_EVERYWHERE", True)
    if not os.environ.get(ENV_URL):
        monkeypatch.setenv(ENV_URL, "memory://")
        for queue in list(queue_core.queue.ON_EMBEDDED_DEFAULT):
            monkeypatch.setattr(queue, "_storage", open_storage("memory://"))
            monkeypatch.setattr(queue, "url", "memory://")
    yield
