"""Auto-replay of dead letters (``dead_letter_replay``), run by the reaper after each pass.

An entry is due once it has been dead for ``Replay.after`` (on the worker's clock); it is
replayed with ``storage.retry_dead`` (atomic: when several workers try, one wins and the
others get ``NotFound``) while its chain of replays is shorter than
``Replay.max_replays`` (the count is stored with the job, see :meth:`Replayer._replays_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import anyio
from anyio import to_thread

from queue_core.app.task import Replay, Task
from queue_core.records.errors import NotFound, StorageError
from queue_core.records.jobs import DeadJob, ms_from_dt
from queue_core.rules import replay_count
from queue_core.storage.protocol import Storage
from queue_core.worker.log import log
from queue_core.worker.outage import Outage
from queue_core.worker.timing import Timing

__all__ = ["Replayer"]

_REPLAY_PAGE: Final = 100
_REPLAY_PAGES: Final = 10
"""At most this many pages of one task's dead letters are read per reaper pass."""
_COUNTS_KEPT: Final = 100_000
"""Replay counts of dead letters this worker caches (see ``Replayer.counts``)."""


class Replayer:
    """Replays the due dead letters of the tasks that set ``dead_letter_replay``."""

    def __init__(
        self,
        storage: Storage,
        tasks: Mapping[str, Task[Any, Any]],
        timing: Timing,
        limiter: anyio.CapacityLimiter,
    ) -> None:
        self.storage = storage
        self.tasks = tasks
        self.timing = timing
        self.limiter = limiter
        self.counts: dict[str, int | None] = {}
        """Dead-letter ids seen -> replays that led to them (``None`` unknown): a cache of
        what storage holds (an entry's count never changes), so an entry kept past
        ``max_replays`` is read once, not on every pass."""
        self._said = 0
        """The dead letters a burst last said it waits for (said once per change)."""
        self._lock: anyio.Lock | None = None
        """Serializes the passes: the reaper's and a burst's end (made on the loop)."""
        self._replayed = False
        """A reaper pass replayed something since the last burst end looked: its new jobs
        are to be claimed before a burst may end (they were not pending when it counted)."""

    @property
    def wanted(self) -> bool:
        """Whether a task of the worker sets ``dead_letter_replay`` (else nothing is read)."""
        return any(t.dead_letter_replay is not None for t in self.tasks.values())

    async def replay_pass(self) -> None:
        """Replay every due dead letter of the tasks that set ``dead_letter_replay``."""
        async with self._locked():
            if await self.replay_due():
                self._replayed = True

    def _locked(self) -> anyio.Lock:
        if self._lock is None:
            self._lock = anyio.Lock()
        return self._lock

    async def replay_due(self) -> int:
        """:meth:`replay_pass`; how many dead letters it replayed."""
        replayed = 0
        for name, task in list(self.tasks.items()):
            replay = task.dead_letter_replay
            if replay is None:
                continue
            for entry in await self._due_dead(name, replay):
                replayed += await self._replay(entry, replay)
        return replayed

    async def due_within(self, horizon_ms: int) -> int:
        """How many dead letters a pass would replay within ``horizon_ms`` from now (a
        burst worker waits for them, as for jobs due that soon: SPEC §2)."""
        soon = 0
        for name, task in list(self.tasks.items()):
            replay = task.dead_letter_replay
            if replay is None:
                continue
            for entry in await self._due_dead(name, replay, horizon_ms):
                done = await self._replays_of(entry)
                soon += done is not None and done < replay.max_replays
        return soon

    async def burst_end(self, horizon_ms: int, outage: Outage, worker_id: str) -> bool | None:
        """A burst worker found nothing else left: replay the dead letters due (``None``:
        claim them), or wait for those due within ``horizon_ms`` (``False``); ``True``:
        there are none (or no task of the worker sets ``dead_letter_replay``)."""
        if not self.wanted:
            return True
        try:
            async with self._locked():
                replayed, self._replayed = self._replayed, False
                if await self.replay_due() or replayed:
                    return None
            soon = await self.due_within(horizon_ms)
        except StorageError as exc:
            if not outage.failed("replay", exc):
                log.warning("auto-replay failed (%s)", exc)
            return False
        if soon and soon != self._said:
            log.info(
                "burst: waiting for %d dead job(s) due for auto-replay within %d s",
                soon,
                horizon_ms // 1000,
                extra={"event": {"event": "burst_waiting", "worker_id": worker_id}},
            )
        self._said = soon
        return not soon

    async def _due_dead(self, task_name: str, replay: Replay, horizon_ms: int = 0) -> list[DeadJob]:
        cutoff = self.timing.now_ms() + horizon_ms - round(replay.after * 1000)
        due: list[DeadJob] = []
        for page in range(_REPLAY_PAGES):
            entries = await to_thread.run_sync(
                self.storage.list_dead,
                _REPLAY_PAGE,
                page * _REPLAY_PAGE,
                task_name,
                limiter=self.limiter,
            )
            due.extend(e for e in entries if ms_from_dt(e.dead_at) <= cutoff)
            if len(entries) < _REPLAY_PAGE:
                break
        return due

    async def _replay(self, entry: DeadJob, replay: Replay) -> int:
        """Replay ``entry`` unless its chain is spent: 1 when it was replayed now -- by this
        call, or meanwhile by another (this worker's reaper pass, another worker): a burst
        then claims again rather than end before the new job ran."""
        done = await self._replays_of(entry)
        if done is None or done >= replay.max_replays:
            return 0
        try:
            new_id = await to_thread.run_sync(
                self.storage.retry_dead, entry.id, limiter=self.limiter
            )
        except NotFound:
            return 1  # replayed first elsewhere (or purged: the next claim finds nothing)
        finally:
            self.counts.pop(entry.id, None)
        log.info(
            "replayed dead job %s of %s (reason %s) as job %s: replay %d of %d",
            entry.job_id,
            entry.task_name,
            entry.reason,
            new_id,
            done + 1,
            replay.max_replays,
        )
        return 1

    async def _replays_of(self, entry: DeadJob) -> int | None:
        """How many replays led to ``entry`` (0 for a job never replayed), or ``None``
        when that cannot be known.

        The count is stored with the job: ``retry_dead`` counts each replay in the new
        job's ``options`` (:func:`~queue_core.rules.outcomes.replay_job`), so a chain
        continues across worker restarts and workers, and replays made by hand count
        too. It is read from the dead job's record
        (:func:`~queue_core.rules.outcomes.replay_count`); when that record is gone
        (pruned) or its count unknown, the entry is not replayed: never more than
        ``max_replays`` replays. Counts are cached per entry (they never change).
        """
        if entry.replay_of is None:
            return 0  # the first job of its chain: nothing to read
        if entry.id in self.counts:
            return self.counts[entry.id]
        record = await to_thread.run_sync(self.storage.get_job, entry.job_id, limiter=self.limiter)
        done = None if record is None else replay_count(record.options, record.replay_of)
        self.counts[entry.id] = done
        if len(self.counts) > _COUNTS_KEPT:  # forget the oldest
            del self.counts[next(iter(self.counts))]
        return done
