"""The published storage contract suite, and test helpers for queue-core users.

A backend author runs every contract test on their storage like this::

    import pytest
    from queue_core.testing import StorageContract

    class TestMyStorage(StorageContract):
        @pytest.fixture
        def storage(self):
            storage = MyStorage(...)   # fresh and empty for every test
            yield storage
            storage.close()

pytest then collects every inherited ``test_*`` method. The tests use only the
:class:`~queue_core.storage.Storage` protocol, pass explicit ``now`` times (epoch ms
around :data:`T0`) and never sleep. Tests of an optional ability (``SupportsWakeup``,
``SupportsJobScan``, ``SupportsFlows``, ``SupportsWorkerRegistry``,
``SupportsCancelPoll``, ``SupportsThroughput``) skip with the ability's name when the storage
lacks it; nothing else skips, except the retention tests: they need a
``storage_with_retention`` fixture, a function that builds a fresh storage with a given
``?retention=`` value (``"0"``, ``"1d"``) and closes it at teardown, and skip naming it
when the backend provides none. Override ``retention_ms`` on the class when the
``storage`` fixture's storage was built with a retention other than the default 7 days.

This is the only part of queue-core that imports pytest.
"""

from queue_core.testing.clock import ManualClock
from queue_core.testing.fixtures import (
    DAY,
    DEFAULT_PAYLOAD,
    HOUR,
    LEASE,
    MIN,
    SEC,
    T0,
    cancel_end,
    claim_one,
    complete_end,
    dead_end,
    enqueue_one,
    error_info,
    new_id,
    new_job,
    retry_end,
    run_concurrently,
    timed_out_end,
)
from queue_core.testing.suite import (
    StorageContract,
    StorageWithRetention,
    TemplateEnqueueContract,
    WaitClaimContract,
)

__all__ = [
    "DAY",
    "DEFAULT_PAYLOAD",
    "HOUR",
    "LEASE",
    "MIN",
    "SEC",
    "T0",
    "ManualClock",
    "StorageContract",
    "StorageWithRetention",
    "TemplateEnqueueContract",
    "WaitClaimContract",
    "cancel_end",
    "claim_one",
    "complete_end",
    "dead_end",
    "enqueue_one",
    "error_info",
    "new_id",
    "new_job",
    "retry_end",
    "run_concurrently",
    "timed_out_end",
]
