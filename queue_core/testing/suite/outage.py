"""Contract: a storage built while its server is down builds, and each call says so.

A worker started during an outage must wait for the server (retrying with backoff), not
exit: so building a storage on a URL whose server does not answer succeeds, and every
call made while it stays down raises
:class:`~queue_core.records.errors.StorageUnavailable` -- not a driver's error, not
another :class:`~queue_core.records.errors.StorageError` -- whose message never shows the
URL's password. Closing such a storage succeeds too.

The backend's test class provides ``unreachable_storage``: a storage built the way users
build it (``from_url``) on a URL of a server that does not answer (a closed port on
127.0.0.1, a file in a directory that does not exist), carrying
:data:`UNREACHABLE_PASSWORD` as its password where the URL takes one. Without the
fixture these tests skip, naming it (an in-process storage has no server to be down).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from queue_core.records.errors import StorageUnavailable
from queue_core.records.jobs import LeaseRef
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import LEASE, T0, complete_end, new_job
from queue_core.testing.suite._base import ContractBase

__all__ = ["OutageContract", "UNREACHABLE_PASSWORD"]

UNREACHABLE_PASSWORD = "contract-unreachable-secret"
"""The password an ``unreachable_storage`` URL carries where its scheme takes one: no
error message may show it."""

_REF = LeaseRef("0" * 32, 1, "token")

_CALLS: dict[str, Callable[[Storage], object]] = {
    "enqueue": lambda s: s.enqueue([new_job()], now=T0),
    "claim": lambda s: s.claim("w1", ["default"], 1, LEASE, now=T0),
    "renew": lambda s: s.renew([_REF], LEASE, now=T0),
    "finish": lambda s: s.finish([complete_end(_REF)], now=T0),
    "reap": lambda s: s.reap(now=T0),
    "get_job": lambda s: s.get_job(_REF.job_id),
    "stats": lambda s: s.stats(now=T0),
}
"""One call of each kind the worker makes (write, claim, lease, end, reap, read)."""


class OutageContract(ContractBase):
    """Building on a server that is down, and calling it while it stays down."""

    @pytest.fixture
    def unreachable_storage(self) -> Iterator[Storage]:
        """Override to build the backend on a URL whose server does not answer (see the
        module docstring); without it these tests skip, naming it."""
        pytest.skip("storage has no unreachable form (no unreachable_storage fixture)")
        yield  # pragma: no cover - unreachable after skip

    @pytest.mark.parametrize("call", sorted(_CALLS))
    def test_each_call_on_a_server_that_is_down_is_storage_unavailable(
        self, unreachable_storage: Storage, call: str
    ) -> None:
        with pytest.raises(StorageUnavailable) as raised:
            _CALLS[call](unreachable_storage)
        assert UNREACHABLE_PASSWORD not in str(raised.value), (
            f"{call}: the error shows the URL's password: {raised.value}"
        )

    def test_calls_after_a_failed_one_fail_the_same_way(self, unreachable_storage: Storage) -> None:
        """A failed call leaves the storage as it was: the next call tries the server
        again and is ``StorageUnavailable`` again, not an error of a connection or client
        broken by the first failure. (That the same storage works once the server
        answers needs the server started on that port: each backend's own tests do it.)"""
        for _ in range(3):
            with pytest.raises(StorageUnavailable):
                unreachable_storage.claim("w1", ["default"], 1, LEASE, now=T0)

    def test_close_of_a_storage_whose_server_is_down_succeeds(
        self, unreachable_storage: Storage
    ) -> None:
        with pytest.raises(StorageUnavailable):
            unreachable_storage.get_job(_REF.job_id)
        unreachable_storage.close()
        unreachable_storage.close()  # and a second close, as fixtures and atexit do
