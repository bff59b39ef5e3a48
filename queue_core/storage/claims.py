"""The optional abilities of a claimed attempt: claiming ahead of free slots (a worker's
``prefetch``), a bound on the result its end stores, and ending an idle worker's wait for
one; re-exported by :mod:`queue_core.storage.abilities`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from queue_core.records.jobs import AttemptEnd, ClaimedJob, LeaseRef

__all__ = [
    "SupportsGiveBack",
    "SupportsPrefetch",
    "SupportsResultLimit",
    "SupportsStartWithFinish",
    "SupportsWaitInterrupt",
    "started_ago",
]


@runtime_checkable
class SupportsPrefetch(Protocol):
    """Claims ahead of free slots (a worker's ``prefetch``): a worker holds jobs whose bodies
    have not started, renewing their leases with the running ones; their attempts'
    deadlines and start times count from the body's start (:meth:`start_claimed`)."""

    def claim_ahead(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        """As :meth:`~queue_core.storage.protocol.Storage.claim`, except that the
        attempts are *held*, not started: no ``deadline`` and no heartbeat deadline
        (only the lease, and a flow step's flow deadline, bound them until
        :meth:`start_claimed`); ``started_at = now`` until then. A held attempt is
        renewed, finished, reaped and cancelled like a running one.

        Contract:
            PrefetchContract
        """
        ...

    def start_claimed(
        self, refs: Sequence[LeaseRef], ago_ms: Sequence[int] = (), *, now: int | None = None
    ) -> list[bool]:
        """The bodies of these held attempts started ``ago_ms[i]`` milliseconds before
        ``now`` (0 where ``ago_ms`` is shorter than ``refs``; the worker measures it on its
        own clock, so no clock but the storage's gives a time): for each current ref the
        attempt's ``started_at`` becomes ``s = now - ago_ms[i]``, its ``deadline``
        ``s + timeout_ms`` (when the job has a timeout) and its heartbeat deadline ``s +
        heartbeat_ms`` (when it has one). Returns, per ref, whether it was current (a ref
        that is not is left as it is).

        Contract:
            PrefetchContract
        """
        ...


@runtime_checkable
class SupportsStartWithFinish(Protocol):
    """Tells the starts of held attempts with the ends written next, in one write (a
    worker's finish thread does both at once; on SQLite, one write transaction instead of
    two). Without it a worker calls ``start_claimed``, then ``finish``."""

    def start_and_finish(
        self,
        refs: Sequence[LeaseRef],
        ago_ms: Sequence[int],
        ends: Sequence[AttemptEnd],
        *,
        now: int | None = None,
    ) -> list[bool]:
        """``start_claimed(refs, ago_ms)``, then ``finish(ends)`` (a ref may be among both:
        its start is stored before its end), at one ``now``; ``finish``'s result. When it
        raises, the starts may be stored without the ends: a retry tells them again.

        Contract:
            PrefetchContract
        """
        ...


@runtime_checkable
class SupportsGiveBack(Protocol):
    """Gives held attempts back unstarted: a stopping worker's prefetched jobs go back to
    the queue without spending an attempt and without an attempt record (SPEC §8). Without
    it a worker releases them like running attempts (``lost``, ``worker_shutdown``, the
    retry budget refunded, an attempt record kept)."""

    def give_back(self, refs: Sequence[LeaseRef], *, now: int | None = None) -> list[bool]:
        """For each current ref of a held attempt (claimed ahead; the caller never told
        its start, :meth:`SupportsPrefetch.start_claimed`): its job is ``queued`` again as
        before its claim -- the same attempt number as then (the held one never counts),
        no attempt record, lease, worker and times cleared, ready at its place, its
        concurrency slot free -- and ``True``. ``False`` (and nothing changed) for a ref
        that is not current and for a flow step's job (the worker releases those as
        running attempts); a storage may also answer ``False`` for a job whose claim it
        cannot undo (e.g. a ``round_robin`` turn), which the worker then releases.

        Contract:
            PrefetchContract
        """
        ...


@runtime_checkable
class SupportsResultLimit(Protocol):
    """Stores results of at most :meth:`max_result_bytes` (SQS + DynamoDB: items and
    transactions are size-bounded). A worker ends an attempt whose serialized result is
    larger as a fatal failure (``SerializationError``) instead of sending storage an end
    it cannot write; other storages keep any size."""

    def max_result_bytes(self) -> int:
        """The largest serialized result ``finish`` stores.

        Contract:
            PayloadContract.test_results_of_a_megabyte_round_trip
        """
        ...


def started_ago(refs: Sequence[LeaseRef], ago_ms: Sequence[int]) -> list[int]:
    """``start_claimed``'s ``ago_ms`` for each of ``refs``: 0 where it is shorter (every
    backend reads the argument through this)."""
    return [ago_ms[i] if i < len(ago_ms) else 0 for i in range(len(refs))]


@runtime_checkable
class SupportsWaitInterrupt(Protocol):
    """A wake-up wait that can be ended early: a worker asked to stop ends its idle
    wait at once instead of waiting it out (up to a second)."""

    def interrupt_waits(self) -> None:
        """End every :meth:`~queue_core.storage.abilities.SupportsWakeup.wait_for_jobs`
        call in progress on this storage object now: each returns ``True`` (a spurious
        wake-up; the worker then sees its stop). Thread-safe and quick: it may be called
        from any thread, so it neither waits for a server (a request goes from a thread
        of its own) nor for a lock a blocked wait holds. A wait that begins after the
        call need not end.

        Contract:
            OptionalAbilitiesContract.test_interrupt_waits_ends_a_wait_in_progress
        """
        ...
