"""The flow-control abilities (SPEC §13), each a small protocol the core checks for.

Re-exported by :mod:`queue_core.storage.abilities` beside the other ``Supports*``
protocols. Every rule they apply is a pure function of :mod:`queue_core.rules.control`
(or :mod:`queue_core.rules.flows.decide` for executions); storage keeps what the rule
reads and applies its answer in the same atomic step as the operation it changes. A
storage without an ability gets a ``ConfigError`` (``invalid_option``) from the facade
for the option that needs it, before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from queue_core.records.control import Pause, PauseKind, Progress, ProgressUpdate
    from queue_core.records.jobs import Enqueued, LeaseRef, NewJob

__all__ = [
    "SupportsDebounce",
    "SupportsPause",
    "SupportsProgress",
    "SupportsRoundRobin",
    "SupportsSupersede",
]


@runtime_checkable
class SupportsRoundRobin(Protocol):
    """``Concurrency(limit, behavior="round_robin", key=...)``: claims rotate over keys.

    Core operation that changes, :meth:`~queue_core.storage.protocol.Storage.claim`: a
    job with ``concurrency_behavior == "round_robin"`` is claimed like a ``queue`` job (at
    most ``concurrency_limit`` running per ``concurrency_key``; no limit when it is
    ``None``), but its group's (``concurrency_group``) jobs are taken in turns: whenever
    the claim order (priority, ready time, enqueue order) reaches a job of the group, the
    job claimed in that place is the best ready job of the group's key that comes first in
    :func:`~queue_core.rules.control.round_robin_order` -- the key served least recently,
    keys never served first, ties by their best job -- among its keys below their limit.
    Serving a key stores the group's next claim counter value as the key's ``served``
    mark, in the same atomic step as the claim. One claim of ``n`` jobs serves the keys in
    that order, one job per key per round (rank each key's ready jobs and sort by ``(rank,
    served, job order)``). A key with a backlog of 1,000 cannot delay another key's job by
    more than one round of claims.

    Atomicity: the choice, the claims and the ``served`` marks are one step; two claimers
    at once never exceed a key's limit nor hand out a job twice.
    """

    def round_robin_keys(self, group: str, *, now: int | None = None) -> list[str]:
        """The keys of ``group`` that have a claimable job at ``now`` (queued, ready, key
        below its limit), in the order the next claims will serve them
        (:func:`~queue_core.rules.control.round_robin_order`). Only reads.

        Contract:
            RoundRobinContract.test_claims_rotate_over_keys_oldest_job_of_each_key_first,
            RoundRobinContract.test_a_new_key_is_served_within_one_round_of_a_backlog,
            RoundRobinContract.test_one_claim_of_many_serves_each_key_once_per_round,
            RoundRobinContract.test_a_key_at_its_limit_is_passed_over,
            RoundRobinContract.test_round_robin_keys_lists_the_next_turns,
            RoundRobinContract.test_concurrent_claims_hold_each_key_limit
        """
        ...


@runtime_checkable
class SupportsSupersede(Protocol):
    """``cancel_in_progress`` and ``latest``: a new job (or execution) ends older ones.

    :meth:`~queue_core.storage.protocol.Storage.enqueue` of a storage with this ability
    honours both the same way (it only cannot say what it superseded); the core calls
    :meth:`enqueue_superseding` for such jobs. With
    :class:`~queue_core.storage.abilities.SupportsFlows`, ``start_execution`` honours both
    for executions: :func:`~queue_core.rules.flows.decide.admit` names the executions
    superseded (``Admission.supersede``) and storage applies
    :func:`~queue_core.rules.flows.plan.supersede_ops` to each before storing the new one.
    At claim, both behave as ``queue``: at most ``concurrency_limit`` running per key.

    Contract:
        SupersedeContract, FlowSupersedeContract
    """

    def enqueue_superseding(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[Enqueued]:
        """:meth:`~queue_core.storage.protocol.Storage.enqueue`, plus, for each job whose
        ``concurrency_behavior`` is ``cancel_in_progress`` or ``latest``, the jobs it ends.

        For such a job, before it is stored: :func:`~queue_core.rules.control.supersede`
        of the ``queued`` and ``running`` jobs with its ``concurrency_key`` (in enqueue
        order) names the jobs to end, and each ends as
        :func:`~queue_core.rules.control.superseded_end` says, ``finished_at = now``:

        * ``cancel_in_progress``: state ``cancelled``, reason ``superseded``. A running
          one's current attempt ends at once, outcome ``cancelled``, reason
          ``superseded``, ``finished_at = now``; its lease and concurrency slot are
          released; a later ``finish`` of that attempt is refused and ``renew`` reports it
          lost (the worker then stops the body). The new job takes its place at once.
        * ``latest``: the key's queued job ends ``skipped``, reason ``superseded``; the
          new job waits in its place; running ones go on.

        Returns one :class:`~queue_core.records.jobs.Enqueued` per job: ``existing`` is
        ``False``, ``superseded`` the ids it ended (oldest first). Within one batch an
        earlier job counts against later ones.

        Atomicity: the lookup, the ends and the store are one step: however many enqueues
        of one key race, a ``cancel_in_progress`` key never has more than
        ``concurrency_limit`` queued + running jobs, a ``latest`` key never more than one
        queued; a finish racing the supersede either takes (the job ended first, and the
        new job finds a free place) or is refused.

        Contract:
            SupersedeContract
        """
        ...


@runtime_checkable
class SupportsDebounce(Protocol):
    """``debounce`` / ``debounce_max`` / ``debounce_key``: many calls, one job, last wins.

    :meth:`~queue_core.storage.protocol.Storage.enqueue` of a storage with this ability
    honours ``debounce_key`` the same way; the core calls :meth:`enqueue_debounced` for
    debounced jobs (the ``NewJob`` of a call is ready ``debounce_ms`` after ``now``).
    """

    def enqueue_debounced(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[Enqueued]:
        """Store each job, unless its ``debounce_key``'s holder (the last job stored with
        that key) is still ``queued``: then the holder takes the job's ``payload`` (last
        call wins: nothing else of the holder changes) and is ready at
        :func:`~queue_core.rules.control.debounce_ready_at` of (the holder's enqueue time
        -- the burst's first call --, ``now``, the job's ``debounce_ms`` and
        ``debounce_max_ms``), keeping its place among jobs of equal ready time; nothing is
        stored for the job, and the answer is ``Enqueued(holder_id, queued,
        existing=True)``. Otherwise the job is stored (``Enqueued(job.id, state)``) and
        becomes the key's holder. Jobs without a key are stored as ``enqueue`` stores
        them. Within one batch, an earlier job is the holder for later ones.

        Atomicity: the holder lookup, the merge or the store, and a claim of the holder
        are ordered: a call racing a claim either changes the holder before it is claimed
        (the claim hands out the new payload) or finds it claimed and stores a new job.

        Contract:
            DebounceContract
        """
        ...


@runtime_checkable
class SupportsPause(Protocol):
    """``queue.pause(queue=…, task=…, flow=…)`` / ``queue.resume(...)``, stored.

    Core operations that change: :meth:`~queue_core.storage.protocol.Storage.claim` hands
    out no job that matches a pause (:func:`~queue_core.rules.control.paused` of its
    queue, its task name, and for a flow step its execution's flow); such jobs stay
    ``queued`` in their order and do not hold back other jobs. ``count_pending`` leaves
    them out, and a wake-up wait (``wait_for_jobs``, ``wait_and_claim``) does not count
    them as ready, so an idle worker does not spin on them. Enqueue, running attempts,
    the reaper and schedules are unaffected.

    Cost: a claim that meets no paused job must cost what it cost before (measure it):
    keep paused queues out of the claim's queue list, and move a paused task's or flow's
    jobs aside once, when a claim meets them (back in their order at resume), rather than
    testing every candidate against the pauses.

    Freshness: after ``pause`` returns, no claim through this storage object hands out a
    matching job; claims through other objects (other workers) stop within 1 s (a cached
    pause list must be re-read at least every second).
    """

    def pause(self, kind: PauseKind, name: str, *, now: int | None = None) -> bool:
        """Store a pause of the queue, task or flow ``name`` (``since = now``); ``False``
        when it was already paused (its ``since`` is kept). Idempotent.

        Contract:
            PauseContract.test_a_paused_queue_is_not_claimed_and_other_queues_are,
            PauseContract.test_a_paused_task_is_not_claimed_and_its_queue_goes_on,
            PauseContract.test_a_paused_flow_starts_none_of_its_steps,
            PauseContract.test_pausing_twice_keeps_the_first_since,
            PauseContract.test_a_pause_of_an_unknown_kind_is_refused_and_stores_nothing
        """
        ...

    def resume(self, kind: PauseKind, name: str) -> bool:
        """Remove that pause; ``False`` when there was none. The paused jobs are
        claimable again at once, in their order.

        Contract:
            PauseContract.test_resume_gives_the_jobs_back_in_their_order
        """
        ...

    def list_paused(self) -> list[Pause]:
        """Every stored pause, sorted by kind then name. Only reads.

        Contract:
            PauseContract.test_list_paused_lists_every_pause_sorted
        """
        ...


@runtime_checkable
class SupportsProgress(Protocol):
    """``ctx.progress(fraction, message)`` / ``JobHandle.progress()``: a job's latest
    report. Core operation that changes: :meth:`~queue_core.storage.protocol.Storage.finish`
    stores an end's ``progress`` (when not ``None``) as :meth:`set_progress` would, in the
    same atomic step, only when the end takes. Progress is kept with its job (after the
    job ends too) and pruned with it.
    """

    def set_progress(
        self, ref: LeaseRef, update: ProgressUpdate, *, now: int | None = None
    ) -> bool:
        """Store ``update`` as the job's progress (``at = now``) when ``ref`` is its
        current attempt; ``False`` (nothing stored) otherwise. Replaces the previous one.

        Contract:
            ProgressContract.test_progress_of_the_current_attempt_is_read_back,
            ProgressContract.test_progress_of_an_attempt_no_longer_current_is_refused
        """
        ...

    def get_progress(self, job_id: str) -> Progress | None:
        """The job's latest stored progress, or ``None`` (none reported, unknown id).

        Contract:
            ProgressContract.test_progress_of_the_current_attempt_is_read_back,
            ProgressContract.test_finish_stores_the_progress_it_carries,
            ProgressContract.test_a_job_without_progress_has_none
        """
        ...
