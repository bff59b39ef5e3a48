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
:class:`~queue_core.storage.protocol.Storage` protocol, pass explicit ``now`` times (epoch ms
around :data:`T0`) and never sleep. Tests of an optional ability (a ``Supports*``
protocol: the table in docs/writing-a-backend.md lists them all) skip when the storage
lacks it, naming the ability and the module it lives in; nothing else skips, except the
retention tests: they need a
``storage_with_retention`` fixture, a function that builds a fresh storage with a given
``?retention=`` value (``"0"``, ``"1d"``) and closes it at teardown, and skip naming it
when the backend provides none; and the outage tests: they need an
``unreachable_storage`` fixture, a storage built on a URL whose server does not answer
(with :data:`UNREACHABLE_PASSWORD` as its password where the URL takes one), and skip
naming it when the backend provides none (an in-process storage). Override
``retention_ms`` on the class when the ``storage`` fixture's storage was built with a
retention other than the default 7 days.

This is the only part of queue-core that imports pytest.

A failing contract test shows the values it compared, whatever loads this package first
(the ``pytest11`` plugin, ``-p queue_core.testing.pytest_plugin``, a ``pytest_plugins``
entry or a plain import in your conftest or test module): the package asks pytest to
rewrite the asserts of its modules before it imports them. (pytest rewrites only test
files and modules registered before they are imported; a ``register_assert_rewrite`` in
your own conftest would come too late.)
"""

import pytest

# Before any module of the suite is imported: each import below is then rewritten.
pytest.register_assert_rewrite(
    "queue_core.testing.clock", "queue_core.testing.fixtures", "queue_core.testing.suite"
)

from queue_core.testing.clock import ManualClock  # noqa: E402
from queue_core.testing.fixtures import (  # noqa: E402
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
from queue_core.testing.suite import (  # noqa: E402
    StorageContract,
    StorageWithRetention,
    TemplateEnqueueContract,
    WaitClaimContract,
)
from queue_core.testing.suite.outage import UNREACHABLE_PASSWORD  # noqa: E402

__all__ = [
    "DAY",
    "DEFAULT_PAYLOAD",
    "HOUR",
    "LEASE",
    "MIN",
    "SEC",
    "T0",
    "UNREACHABLE_PASSWORD",
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
