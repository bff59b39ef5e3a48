"""Background services of the worker: finisher, lease renewal, heartbeat writer,
deadline and heartbeat-silence watchdog, auto-replay of dead letters, shutdown.

Every wait here runs on the worker's clock (:class:`~queue_core.worker.timing.Timing`),
so tests drive the services by advancing a manual clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import anyio
from anyio import to_thread

from queue_core.errors import LeaseLost, NotFound, StorageError
from queue_core.model import AttemptEnd, DeadJob, LeaseRef, Reason, ms_from_dt
from queue_core.policy import renew_interval, replay_count
from queue_core.task import Replay
from queue_core.worker.flowsteps import flow_deadline_of
from queue_core.worker.log import log
from queue_core.worker.recording import AttemptRecording
from queue_core.worker.slots import Attempt

__all__ = ["DEADLINE_LEAD", "Services", "deadline_of"]

DEADLINE_LEAD: Final = 0.2
_WATCH_EVERY: Final = 0.05
_REPLAY_PAGE: Final = 100
_REPLAY_PAGES: Final = 10
"""At most this many pages of one task's dead letters are read per reaper pass."""
_COUNTS_KEPT: Final = 100_000
"""Replay counts of dead letters this worker caches (see ``_replay_counts``)."""


def deadline_of(att: Attempt) -> float | None:
    """When the worker ends ``att`` for its ``timeout`` (clock monotonic), or ``None``.

    Counted from the claim's return (storage counts from its claim stamp, a moment
    earlier), and acted on a little early (``DEADLINE_LEAD``, at most a tenth of the
    timeout): storage reaps the attempt at its own deadline, and the worker's record --
    with the mode and the error -- must land first, or it is refused as no longer
    current. So the worker is early by at most the lead, never by a slow claim.
    """
    job = att.job
    timeout_ms = job.timeout_ms
    if timeout_ms is None and job.flow_deadline_at is None:
        return None
    flow = flow_deadline_of(job, att.claimed_at, DEADLINE_LEAD)
    if timeout_ms is None:
        return flow
    timeout = timeout_ms / 1000.0
    own = att.claimed_at + timeout - min(DEADLINE_LEAD, timeout / 10.0)
    return own if flow is None else min(own, flow)


def _silence_limit(att: Attempt) -> float | None:
    """When ``att``'s heartbeat silence is judged too long (acted on early, like a
    deadline), or ``None`` when it needs no heartbeats."""
    hb_ms = att.job.heartbeat_ms
    if not hb_ms:
        return None
    hb = hb_ms / 1000.0
    return att.last_beat + hb - min(DEADLINE_LEAD, hb / 10.0)


class Services(AttemptRecording):
    """The worker's long-running services (each started in its task group)."""

    # ------------------------------------------------------------------ finisher

    async def _finisher(self) -> None:
        """Hands buffered ends to the finish thread (which writes them without a loop
        round trip per batch, see :mod:`queue_core.worker.finishing`); after a failed
        write, backs off on the worker's clock and lets the thread write again."""
        while True:
            failed = self._finish_failed
            if failed is not None:
                self._finish_failed = None
                if not isinstance(failed, StorageError):
                    raise failed
                if not self._outage.failed("finish", failed):
                    log.warning(
                        "finish of %d attempt ends failed (%s); will retry",
                        self._finish_io.unwritten(),
                        failed,
                    )
                await self._timing.sleep(self._flush_backoff.next())
                self._finish_io.resume()
                continue
            if not self._ends:
                self._flush_wake = self._event()
                await self._flush_wake.wait()
                continue
            batch, self._ends = self._ends, []
            self._finish_io.put(batch)

    def _delivery_begins(self) -> None:
        """On the loop, before a batch of body-thread ends is recorded."""
        self._delivering = True

    def _delivery_ended(self) -> None:
        """On the loop, after it: hand what was recorded to the finish thread at once
        (in order after every end handed over before), instead of waking the finisher
        task for it: one task step less per batch."""
        self._delivering = False
        if self._ends:
            batch, self._ends = self._ends, []
            self._finish_io.put(batch)

    def _finish_failed_soon(self, exc: BaseException) -> None:
        """On the loop: the finish thread's write raised (it holds the batch)."""
        self._finish_failed = exc
        self._flush_wake.set()

    def _finish_written(self, batch: list[AttemptEnd], took: Sequence[bool]) -> None:
        """On the finish thread: a batch was written."""
        self._flush_backoff.reset()
        self._outage.ok()
        for end, ok in zip(batch, took, strict=False):
            if not ok:
                log.info(
                    "attempt %d of job %s was no longer current; its %s end was refused",
                    end.ref.attempt,
                    end.ref.job_id,
                    end.outcome,
                )

    async def _flush_all(self) -> None:
        """Wait until every buffered end is written (the finisher hands them over)."""
        while self._ends or self._finish_io.unwritten():
            if self._ends:
                self._flush_wake.set()
            self._finish_io.hurry()
            await anyio.sleep(0.001)

    # ------------------------------------------------------------------ leases

    async def _renewer(self) -> None:
        """Renew every held lease each third of the lease (on the worker's clock)."""
        interval = renew_interval(self.lease)
        while True:
            await self._timing.sleep(interval)
            live = self._table.live()
            if live:
                await self._renew([a.ref for a in live])

    async def _renew(self, refs: list[LeaseRef]) -> None:
        try:
            res = await to_thread.run_sync(
                self.storage.renew, refs, self.lease_ms, limiter=self._io
            )
        except StorageError as exc:
            if not self._outage.failed("lease renewal", exc):
                log.warning("lease renewal failed (%s)", exc)
            return
        running = self._table.running
        for ref in res.lost:
            att = running.get(ref)
            if att is not None and not att.ended:
                log.warning("lease of job %s attempt %d lost", ref.job_id, ref.attempt)
                att.lease_lost = True
                att.ended = True
                self._stop_attempt(att)
                if att.mode == "thread":  # reaped (e.g. heartbeat_timeout): body goes on
                    self._table.mark_stuck(att)
                    self._slot_wake.set()
        for ref in res.cancel_requested:
            att = running.get(ref)
            if att is not None and not att.ended:
                att.cancel_requested = True
                self._stop_attempt(att)

    # ------------------------------------------------------------------ heartbeats

    async def _heartbeater(self) -> None:
        """Writes heartbeats that async bodies (and process children) queued."""
        while True:
            if not self._heartbeats:
                self._hb_wake = anyio.Event()
                await self._hb_wake.wait()
                continue
            pending, self._heartbeats = self._heartbeats, {}
            for ref, att in pending.items():
                if not att.ended:
                    await self._write_heartbeat(ref, att)

    async def _write_heartbeat(self, ref: LeaseRef, att: Attempt) -> None:
        try:
            cancel = await to_thread.run_sync(self.storage.heartbeat, ref, limiter=self._io)
        except LeaseLost:
            att.lease_lost = True
            att.ended = True
            self._stop_attempt(att)
            return
        except StorageError as exc:
            if not self._outage.failed("heartbeat", exc):
                log.warning("heartbeat of job %s failed (%s)", ref.job_id, exc)
            return
        if cancel and not att.cancel_requested:
            att.cancel_requested = True
            self._stop_attempt(att)

    # ------------------------------------------------------------------ watchdog

    async def _watchdog(self) -> None:
        """Judges deadlines and heartbeat silence every ``_WATCH_EVERY`` clock seconds."""
        while True:
            await self._timing.sleep(_WATCH_EVERY)
            if self._stop.is_set() and not self._stopping:
                self._request_stop()
            self._watch(self._timing.monotonic())

    def _watch(self, now: float) -> None:
        for att in list(self._table.running.values()):
            if att.ended:
                continue
            silent_by = _silence_limit(att)
            if silent_by is not None and now >= silent_by:
                self._heartbeat_expired(att)
            elif att.deadline is not None and now >= att.deadline and not att.stuck:
                self._deadline_passed(att)

    def _deadline_passed(self, att: Attempt) -> None:
        """``att`` ran past its ``timeout``: record it; stop it or mark it stuck."""
        self._timed_out(att)
        if att.mode != "thread":  # a process group is stopped, an async body cancelled
            att.expired = True
            if att.mode == "async":
                self._stop_attempt(att)
            return
        self._table.mark_stuck(att)
        if att.ctx is not None:
            att.ctx._cancel()
        log.warning(
            "job %s attempt %d timed out in a thread that cannot be stopped; "
            "its slot is stuck until it returns (%d stuck)",
            att.ref.job_id,
            att.ref.attempt,
            self._table.stuck,
        )
        self._slot_wake.set()

    def _heartbeat_expired(self, att: Attempt) -> None:
        """``att`` sent no heartbeat in time: record it, stop what can be stopped."""
        self._timed_out(att, Reason.HEARTBEAT_TIMEOUT)
        att.expired = True  # a process group is stopped, an async body cancelled
        self._stop_attempt(att)
        if att.mode == "thread":
            self._table.mark_stuck(att)
            self._slot_wake.set()
        log.warning(
            "job %s attempt %d sent no heartbeat within %g s: timed out",
            att.ref.job_id,
            att.ref.attempt,
            (att.job.heartbeat_ms or 0) / 1000,
        )

    # ------------------------------------------------------------------ auto-replay

    async def _replay_pass(self) -> None:
        """Replay due dead letters of the tasks that set ``dead_letter_replay``.

        Run by the reaper after each reaping pass. An entry is due once it has been dead
        for ``Replay.after``; it is replayed with ``storage.retry_dead`` (atomic: when
        several workers try, one wins and the others get ``NotFound``) while its chain
        of replays is shorter than ``Replay.max_replays`` (the count is stored with the
        job, see :meth:`_replays_of`).
        """
        for name, task in list(self._tasks.items()):
            replay = task.dead_letter_replay
            if replay is None:
                continue
            for entry in await self._due_dead(name, replay):
                await self._replay(entry, replay)

    async def _due_dead(self, task_name: str, replay: Replay) -> list[DeadJob]:
        cutoff = self._timing.now_ms() - round(replay.after * 1000)
        due: list[DeadJob] = []
        for page in range(_REPLAY_PAGES):
            entries = await to_thread.run_sync(
                self.storage.list_dead,
                _REPLAY_PAGE,
                page * _REPLAY_PAGE,
                task_name,
                limiter=self._io,
            )
            due.extend(e for e in entries if ms_from_dt(e.dead_at) <= cutoff)
            if len(entries) < _REPLAY_PAGE:
                break
        return due

    async def _replay(self, entry: DeadJob, replay: Replay) -> None:
        done = await self._replays_of(entry)
        if done is None or done >= replay.max_replays:
            return
        try:
            new_id = await to_thread.run_sync(self.storage.retry_dead, entry.id, limiter=self._io)
        except NotFound:
            return  # another worker replayed it first
        finally:
            self._replay_counts.pop(entry.id, None)
        log.info(
            "replayed dead job %s of %s (reason %s) as job %s: replay %d of %d",
            entry.job_id,
            entry.task_name,
            entry.reason,
            new_id,
            done + 1,
            replay.max_replays,
        )

    async def _replays_of(self, entry: DeadJob) -> int | None:
        """How many replays led to ``entry`` (0 for a job never replayed), or ``None``
        when that cannot be known.

        The count is stored with the job: ``retry_dead`` counts each replay in the new
        job's ``options`` (:func:`~queue_core.policy.outcomes.replay_job`), so a chain
        continues across worker restarts and workers, and replays made by hand count
        too. It is read from the dead job's record
        (:func:`~queue_core.policy.outcomes.replay_count`); when that record is gone
        (pruned) or its count unknown, the entry is not replayed: never more than
        ``max_replays`` replays. Counts are cached per entry (they never change).
        """
        if entry.replay_of is None:
            return 0  # the first job of its chain: nothing to read
        if entry.id in self._replay_counts:
            return self._replay_counts[entry.id]
        record = await to_thread.run_sync(self.storage.get_job, entry.job_id, limiter=self._io)
        done = None if record is None else replay_count(record.options, record.replay_of)
        self._replay_counts[entry.id] = done
        if len(self._replay_counts) > _COUNTS_KEPT:  # forget the oldest
            del self._replay_counts[next(iter(self._replay_counts))]
        return done

    # ------------------------------------------------------------------ shutdown

    async def _shutdown(self) -> None:
        """Give running attempts ``shutdown_grace`` (clock seconds), then release them."""
        table, timing = self._table, self._timing
        began = timing.monotonic()
        while table.busy() > 0 and any(not a.ended for a in table.running.values()):
            # read each time: a second signal sets the grace to 0 (and wakes this wait)
            left = began + self.shutdown_grace - timing.monotonic()
            if left <= 0:
                break
            self._slot_wake = anyio.Event()
            await timing.wait(self._slot_wake, left)
        for att in list(table.running.values()):
            if att.ended:
                continue
            self._released(att)
            self._stop_attempt(att)
            log.info("released job %s attempt %d for retry", att.ref.job_id, att.ref.attempt)
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.shutdown_grace + 10.0):
            await self._flush_all()
