"""When the worker ends an attempt, and the watchdog service that does it.

:func:`deadline_of` says when an attempt's ``timeout`` or its flow's deadline ends it
(the runner sets ``Attempt.deadline`` as a body starts). The :class:`Watchdog` judges,
every ``_WATCH_EVERY`` seconds of the worker's clock, the attempts that ran past that
deadline or sent no heartbeat in time: it has the recorder record them ``timed_out``
and stops what can be stopped (a thread body cannot: its slot is *stuck*).
"""

from __future__ import annotations

from typing import Final

from queue_core.records.jobs import Reason
from queue_core.worker.flowsteps import flow_deadline_of
from queue_core.worker.log import log
from queue_core.worker.recording import Recorder
from queue_core.worker.slots import Attempt
from queue_core.worker.state import RunState
from queue_core.worker.timing import Timing

__all__ = ["Watchdog", "deadline_of"]

_WATCH_EVERY: Final = 0.05


def deadline_of(att: Attempt, started: float | None = None) -> float | None:
    """When the worker ends ``att`` (clock monotonic), or ``None``: at its ``timeout``
    or at its flow's deadline, whichever comes first -- never before (SPEC §4).

    The ``timeout`` counts from ``started``, when the body starts (default: the claim's
    return, ``att.claimed_at``); a flow's deadline is a moment in time (converted from
    storage's claim stamp, which came before the claim's return, so it is never early).
    Storage counts the timeout from its claim stamp, a moment earlier, and its reaper
    judges a deadline passed only ``REAP_MARGIN_MS`` after it
    (:func:`~queue_core.rules.leases.reap_cutoff`), so the worker's record -- with the
    mode and the error -- lands first.
    """
    job = att.job
    timeout_ms = job.timeout_ms
    if timeout_ms is None and job.flow_deadline_at is None:
        return None
    flow = flow_deadline_of(job, att.claimed_at)
    if timeout_ms is None:
        return flow
    begin = att.claimed_at if started is None else max(att.claimed_at, started)
    own = begin + timeout_ms / 1000.0
    return own if flow is None else min(own, flow)


def _silence_limit(att: Attempt) -> float | None:
    """When ``att``'s heartbeat silence is judged too long -- its bound after the last
    heartbeat written, never before -- or ``None`` when it needs no heartbeats."""
    hb_ms = att.job.heartbeat_ms
    if not hb_ms:
        return None
    return att.last_beat + hb_ms / 1000.0


class Watchdog:
    """Judges deadlines and heartbeat silence of the running attempts."""

    def __init__(self, run: RunState, recorder: Recorder, timing: Timing) -> None:
        self.run = run
        self.recorder = recorder
        self.timing = timing

    async def watch(self) -> None:
        """Every ``_WATCH_EVERY`` clock seconds: see a stop asked from another thread,
        then judge every running attempt."""
        run, timing = self.run, self.timing
        while True:
            await timing.sleep(_WATCH_EVERY)
            if run.stop.is_set() and not run.stopping:
                run.request_stop()
            self.judge(timing.monotonic())

    def judge(self, now: float) -> None:
        for att in list(self.run.table.running.values()):
            if att.ended:
                continue
            silent_by = _silence_limit(att)
            if silent_by is not None and now >= silent_by:
                self._heartbeat_expired(att)
            elif att.deadline is not None and now >= att.deadline and not att.stuck:
                self._deadline_passed(att)

    def _deadline_passed(self, att: Attempt) -> None:
        """``att`` ran past its ``timeout``: record it; stop it or mark it stuck."""
        self.recorder.timed_out(att)
        if att.mode != "thread":  # a process group is stopped, an async body cancelled
            att.expired = True
            if att.mode == "async":
                att.stop()
            return
        table = self.run.table
        table.mark_stuck(att)
        if att.ctx is not None:
            att.ctx._cancel()
        log.warning(
            "job %s attempt %d timed out in a thread that cannot be stopped; "
            "its slot is stuck until it returns (%d stuck)",
            att.ref.job_id,
            att.ref.attempt,
            table.stuck,
        )
        self.run.slot_wake.set()

    def _heartbeat_expired(self, att: Attempt) -> None:
        """``att`` sent no heartbeat in time: record it, stop what can be stopped."""
        self.recorder.timed_out(att, Reason.HEARTBEAT_TIMEOUT)
        att.expired = True  # a process group is stopped, an async body cancelled
        att.stop()
        if att.mode == "thread":
            self.run.table.mark_stuck(att)
            self.run.slot_wake.set()
        log.warning(
            "job %s attempt %d sent no heartbeat within %g s: timed out",
            att.ref.job_id,
            att.ref.attempt,
            (att.job.heartbeat_ms or 0) / 1000,
        )
