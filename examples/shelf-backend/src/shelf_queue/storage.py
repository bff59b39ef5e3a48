"""``ShelfStorage``: queue-core's ``Storage`` protocol over one locked JSON file.

Every operation takes the file's lock, reads the document, changes it and writes it
back (:class:`~shelf_queue.shelf.Shelf`), so each one is atomic. Jobs are found by
scanning the document: small and plain, not fast. Every rule that is not storage's own
is queue-core's, called rather than re-derived (docs/writing-a-backend.md, "Call these,
don't re-derive them"): :func:`~queue_core.rules.outcomes.end_state` in ``finish``,
:func:`~queue_core.rules.outcomes.reap_verdict` in ``reap``,
:func:`~queue_core.rules.leases.schedule_to_start_expired` in ``claim`` and ``reap``,
:func:`~queue_core.rules.outcomes.replay_job` in ``retry_dead``,
:func:`~queue_core.rules.outcomes.parse_retention` for ``?retention=``,
:meth:`~queue_core.records.jobs.RenewResult.of` and :meth:`~queue_core.records.jobs.DeadJob.build`.

URL: ``shelf:///absolute/path/queue.json`` (``?retention=7d`` optional).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from typing_extensions import Self

from queue_core.records.errors import (
    ConfigError,
    LeaseLost,
    NotFound,
    StorageError,
)
from queue_core.records.jobs import (
    AttemptEnd,
    AttemptRecord,
    ClaimedJob,
    DeadJob,
    ErrorInfo,
    JobRecord,
    JobState,
    LeaseRef,
    NewJob,
    QueueStats,
    ReapedJob,
    Reason,
    RenewResult,
)
from queue_core.rules.leases import schedule_to_start_expired
from queue_core.rules.outcomes import (
    DEFAULT_RETENTION_MS,
    end_state,
    parse_retention,
    reap_verdict,
    replay_job,
)
from queue_core.rules.paging import check_page
from queue_core.storage.job_ids import new_job_id
from queue_core.storage.protocol import Storage, StorageFactory
from shelf_queue.records import (
    attempt_record,
    dead_record,
    job_record,
    new_job_of,
    spec_of,
    to_b64,
)
from shelf_queue.shelf import Document, Shelf

__all__ = ["ShelfStorage"]

Row = dict[str, Any]
_FINISHED = {s.value for s in JobState if s.finished}


def _clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _current(doc: Document, ref: LeaseRef) -> Row | None:
    """The job of ``ref`` when ``ref`` names its running attempt (fencing)."""
    job: Row | None = doc["jobs"].get(ref.job_id)
    if job is None or job["state"] != JobState.RUNNING.value:
        return None
    if (job["attempt"], job["token"]) != (ref.attempt, ref.lease_token):
        return None
    return job


def _running_with_key(doc: Document, key: str, states: set[str]) -> int:
    return sum(
        1
        for j in doc["jobs"].values()
        if j["state"] in states and j["spec"]["concurrency_key"] == key
    )


def _place(job: Row) -> int:
    """A queued job's place in line: its ready time, or the place a reap kept for it
    (``reap_place_at``) while its backoff delays its ready time."""
    place = job.get("place_at")
    return int(job["ready_at"] if place is None else place)


class ShelfStorage(Storage):
    """Every job in one JSON file (``shelf:///path/queue.json``).

    Args:
        path: the file (created on first write; its directory must exist).
        retention_ms: how long finished jobs are kept before ``prune`` deletes them.
    """

    def __init__(self, path: str | Path, *, retention_ms: int = DEFAULT_RETENTION_MS) -> None:
        self.path = Path(path)
        self.retention_ms = retention_ms
        self._shelf = Shelf(self.path)

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Build from ``shelf:///absolute/path.json[?retention=<duration>]``."""
        parts = urlsplit(url)
        if parts.scheme != "shelf" or parts.netloc or not parts.path.startswith("/"):
            raise ConfigError(
                f"invalid shelf URL {url!r}: expected shelf:///absolute/path/queue.json",
                code="invalid_url",
                field="url",
                value=url,
            )
        query = parse_qs(parts.query)
        unknown = sorted(set(query) - {"retention"})
        if unknown:
            raise ConfigError(
                f"unknown shelf:// option(s) {', '.join(unknown)}; supported: retention",
                code="invalid_option",
                field="url",
                value=unknown[0],
            )
        retention = query.get("retention", [None])[-1]
        if retention is None:
            return cls(parts.path)
        return cls(parts.path, retention_ms=parse_retention(retention))

    def __repr__(self) -> str:
        return f"ShelfStorage({str(self.path)!r})"

    def _now(self, now: int | None) -> int:
        return _clock_ms() if now is None else now

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        t = self._now(now)
        with self._shelf.change() as doc:
            return [self._add(doc, job, t) for job in jobs]

    def _add(self, doc: Document, spec: NewJob, t: int) -> JobState:
        if spec.id in doc["jobs"]:
            raise StorageError(f"job id {spec.id!r} already exists")
        doc["seq"] += 1
        ready_at = (spec.run_at if spec.run_at is not None else t) + spec.delay_ms
        job: Row = {
            "spec": spec_of(spec), "seq": doc["seq"], "state": JobState.QUEUED.value,
            "reason": None, "enqueued_at": t, "ready_at": ready_at,
            "lost_delay_ms": spec.lost_delay_ms, "attempt": 0, "token": None,
            "lease_until": None, "deadline": None, "beat_until": None, "cancel": False,
            "started_at": None, "finished_at": None, "result": None, "error": None,
            "dead_id": None, "attempts": [],
        }  # fmt: skip
        key, limit = spec.concurrency_key, spec.concurrency_limit
        if spec.concurrency_skip and key is not None and limit is not None:
            if _running_with_key(doc, key, {"queued", "running"}) >= limit:
                job.update(state="skipped", reason="concurrency_limit", finished_at=t)
        doc["jobs"][spec.id] = job
        return JobState(job["state"])

    # ------------------------------------------------------------------ claim / lease

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        t = self._now(now)
        with self._shelf.change() as doc:
            ready = [
                j
                for j in doc["jobs"].values()
                if j["state"] == "queued"
                and j["spec"]["queue"] in queues
                and j["ready_at"] <= t
                and not schedule_to_start_expired(
                    t, j["ready_at"], j["spec"]["schedule_to_start_ms"]
                )
            ]
            ready.sort(key=lambda j: (-j["spec"]["priority"], _place(j), j["seq"]))
            claimed: list[ClaimedJob] = []
            for job in ready:
                if len(claimed) == limit:
                    break
                if self._slot_free(doc, job):
                    claimed.append(self._start(job, worker_id, lease_ms, t))
            return claimed

    def _slot_free(self, doc: Document, job: Row) -> bool:
        spec = job["spec"]
        key: str | None = spec["concurrency_key"]
        limit: int | None = spec["concurrency_limit"]
        if key is None or limit is None or spec["concurrency_skip"]:
            return True
        return _running_with_key(doc, key, {"running"}) < limit

    def _start(self, job: Row, worker_id: str, lease_ms: int, t: int) -> ClaimedJob:
        spec = new_job_of(job["spec"])
        job.update(
            state="running", reason=None, attempt=job["attempt"] + 1, token=uuid.uuid4().hex,
            lease_until=t + lease_ms, started_at=t,
            deadline=None if spec.timeout_ms is None else t + spec.timeout_ms,
            beat_until=None if spec.heartbeat_ms is None else t + spec.heartbeat_ms,
        )  # fmt: skip
        job["attempts"].append(
            {"number": job["attempt"], "outcome": None, "reason": None, "error": None,
             "worker_id": worker_id, "started_at": t, "finished_at": None, "mode": None}
        )  # fmt: skip
        return ClaimedJob(
            id=spec.id, task_name=spec.task_name, queue=spec.queue, payload=spec.payload,
            attempt=job["attempt"], lease_token=job["token"], lease_expires_at=job["lease_until"],
            deadline=job["deadline"], max_attempts=spec.max_attempts, priority=spec.priority,
            timeout_ms=spec.timeout_ms, heartbeat_ms=spec.heartbeat_ms, options=spec.options,
            enqueued_at=job["enqueued_at"], replay_of=spec.replay_of, started_at=t,
            run_at=job["ready_at"],
        )  # fmt: skip

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        t = self._now(now)
        with self._shelf.change() as doc:
            flags: list[bool | None] = []
            for ref in refs:
                job = _current(doc, ref)
                if job is not None:
                    job["lease_until"] = t + lease_ms
                flags.append(None if job is None else job["cancel"])
            return RenewResult.of(refs, flags)

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        t = self._now(now)
        with self._shelf.change() as doc:
            job = _current(doc, ref)
            if job is None:
                raise LeaseLost(f"attempt {ref.attempt} of job {ref.job_id} is not current")
            beat = job["spec"]["heartbeat_ms"]
            if beat is not None:
                job["beat_until"] = t + beat
            cancel: bool = job["cancel"]
            return cancel

    # ------------------------------------------------------------------ attempt end

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        t = self._now(now)
        with self._shelf.change() as doc:
            return [self._finish_one(doc, end, t) for end in ends]

    def _finish_one(self, doc: Document, end: AttemptEnd, t: int) -> bool:
        job = _current(doc, end.ref)
        if job is None:
            return False
        error = None if end.error is None else _error_row(end.error)
        job["attempts"][-1].update(
            outcome=end.outcome.value, reason=end.reason, error=error, finished_at=t, mode=end.mode
        )
        if error is not None:
            job["error"] = error
        if not end.decision.spends_attempt:  # the attempt spent none of the budget
            job["spec"]["max_attempts"] += 1
        state, reason = end_state(end.decision, end.reason)
        if state is JobState.QUEUED:
            if end.decision.lost_delay_ms is not None:
                job["lost_delay_ms"] = end.decision.lost_delay_ms
            self._requeue(job, t + end.decision.delay_ms)
        elif state is JobState.DEAD:
            assert reason is not None
            self._dead_letter(doc, job, reason, end.error, t)
        else:
            if state is JobState.SUCCEEDED:
                job["result"] = to_b64(end.result)
            self._end(job, state, reason, t)
        return True

    def _requeue(self, job: Row, ready_at: int, place_at: int | None = None) -> None:
        job.update(
            state="queued", reason=None, ready_at=ready_at, place_at=place_at, token=None,
            cancel=False,
        )  # fmt: skip

    def _end(self, job: Row, state: JobState, reason: str | None, t: int) -> None:
        job.update(state=state.value, reason=reason, finished_at=t, token=None)

    def _dead_letter(
        self, doc: Document, job: Row, reason: str, error: ErrorInfo | None, t: int
    ) -> None:
        self._end(job, JobState.DEAD, reason, t)
        doc["seq"] += 1
        dead_id = uuid.uuid4().hex
        job["dead_id"] = dead_id
        doc["dead"][dead_id] = {
            "id": dead_id, "seq": doc["seq"], "spec": job["spec"], "reason": reason,
            "error": None if error is None else error.message,
            "error_class": None if error is None else error.error_class,
            "attempts": list(job["attempts"]), "dead_at": t,
        }  # fmt: skip

    # ------------------------------------------------------------------ reaper

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        t = self._now(now)
        with self._shelf.change() as doc:
            running = sorted(
                (j for j in doc["jobs"].values() if j["state"] == "running"),
                key=lambda j: (j["lease_until"], j["seq"]),
            )
            reaped: list[ReapedJob] = []
            for job in running:
                if len(reaped) == limit:
                    break
                if (done := self._reap_attempt(doc, job, t)) is not None:
                    reaped.append(done)
            return reaped + self._reap_unstarted(doc, t, limit - len(reaped))

    def _reap_attempt(self, doc: Document, job: Row, t: int) -> ReapedJob | None:
        spec = job["spec"]
        verdict = reap_verdict(
            t,
            lease_expires_at=job["lease_until"],
            deadline=job["deadline"],
            heartbeat_expires_at=job["beat_until"],
            cancel_requested=job["cancel"],
            attempt=job["attempt"],
            max_attempts=spec["max_attempts"],
            lost_delay_ms=job["lost_delay_ms"],
            run_at=job["ready_at"],
            schedule_to_start_ms=spec["schedule_to_start_ms"],
            place_at=job.get("place_at"),
        )
        if verdict is None:
            return None
        job["attempts"][-1].update(
            outcome=verdict.outcome.value, reason=verdict.reason.value, finished_at=t
        )
        if verdict.state is JobState.QUEUED:
            assert verdict.ready_at is not None
            self._requeue(job, verdict.ready_at, verdict.place_at)
        elif verdict.state is JobState.DEAD:
            assert verdict.job_reason is not None
            self._dead_letter(doc, job, verdict.job_reason, None, t)
        else:
            self._end(job, verdict.state, verdict.job_reason, t)
        return ReapedJob(
            job_id=spec["id"],
            attempt=job["attempt"],
            outcome=verdict.outcome,
            reason=verdict.reason.value,
            state=verdict.state,
        )

    def _reap_unstarted(self, doc: Document, t: int, limit: int) -> list[ReapedJob]:
        """Queued jobs past their schedule-to-start bound: dead-lettered unrun."""
        expired = [
            j
            for j in doc["jobs"].values()
            if j["state"] == "queued"
            and schedule_to_start_expired(t, j["ready_at"], j["spec"]["schedule_to_start_ms"])
        ][: max(limit, 0)]
        for job in expired:
            self._dead_letter(doc, job, Reason.SCHEDULE_TO_START.value, None, t)
        return [
            ReapedJob(job_id=j["spec"]["id"], attempt=0, outcome=None,
                      reason=Reason.SCHEDULE_TO_START.value, state=JobState.DEAD)
            for j in expired
        ]  # fmt: skip

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        cutoff = self._now(now) - self.retention_ms
        with self._shelf.change() as doc:
            done = sorted(
                (j for j in doc["jobs"].values()
                 if j["state"] in _FINISHED and j["finished_at"] <= cutoff),
                key=lambda j: (j["finished_at"], j["seq"]),
            )[:limit]  # fmt: skip
            for job in done:
                del doc["jobs"][job["spec"]["id"]]
            return len(done)

    # ------------------------------------------------------------------ control and reads

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        t = self._now(now)
        with self._shelf.change() as doc:
            job = doc["jobs"].get(job_id)
            if job is None:
                raise NotFound(f"no job with id {job_id!r}")
            if job["state"] == "queued":
                self._end(job, JobState.CANCELLED, Reason.CANCELLED.value, t)
            elif job["state"] == "running":
                job["cancel"] = True
            return JobState(job["state"])

    def get_job(self, job_id: str) -> JobRecord | None:
        with self._shelf.read() as doc:
            job = doc["jobs"].get(job_id)
            return None if job is None else job_record(job)

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        with self._shelf.read() as doc:
            job = doc["jobs"].get(job_id)
            return [] if job is None else [attempt_record(a) for a in job["attempts"]]

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        by = self._now(now) + horizon_ms
        with self._shelf.read() as doc:
            return sum(
                1
                for j in doc["jobs"].values()
                if j["spec"]["queue"] in queues
                and (j["state"] == "running" or (j["state"] == "queued" and j["ready_at"] <= by))
            )

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        t = self._now(now)
        counts: dict[str, dict[str, int]] = {}
        with self._shelf.read() as doc:
            for job in doc["jobs"].values():
                state = job["state"]
                if state == "queued":
                    state = "ready" if job["ready_at"] <= t else "scheduled"
                row = counts.setdefault(job["spec"]["queue"], {})
                row[state] = row.get(state, 0) + 1
        return [QueueStats(queue=q, **counts[q]) for q in sorted(counts)]

    # ------------------------------------------------------------------ dead letters

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        limit, offset = check_page(limit, offset)  # the shared bounds, before any read
        with self._shelf.read() as doc:
            entries = sorted(
                (e for e in doc["dead"].values()
                 if task_name is None or e["spec"]["task_name"] == task_name),
                key=lambda e: (e["dead_at"], e["seq"]),
                reverse=True,
            )  # fmt: skip
            return [dead_record(e) for e in entries[offset : offset + limit]]

    def get_dead(self, dead_id: str) -> DeadJob | None:
        with self._shelf.read() as doc:
            entry = doc["dead"].get(dead_id)
            return None if entry is None else dead_record(entry)

    def retry_dead(self, dead_id: str, queue: str | None = None, *, now: int | None = None) -> str:
        t = self._now(now)
        with self._shelf.change() as doc:
            entry = doc["dead"].get(dead_id)
            if entry is None:
                raise NotFound(f"no dead-letter entry with id {dead_id!r}")
            new_id = new_job_id()
            spec = new_job_of(entry["spec"])  # the job as it was enqueued
            replay = replay_job(spec, dead_id=dead_id, new_id=new_id, queue=queue, now=t)
            del doc["dead"][dead_id]
            self._add(doc, replay, t)
            return new_id

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        with self._shelf.change() as doc:
            doomed = [
                dead_id
                for dead_id, e in doc["dead"].items()
                if (task_name is None or e["spec"]["task_name"] == task_name)
                and (before is None or e["dead_at"] <= before)
            ]
            for dead_id in doomed:
                del doc["dead"][dead_id]
            return len(doomed)

    def close(self) -> None:
        """Nothing stays open between operations."""

    # ------------------------------------------------------------------ SupportsJobScan

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        limit, offset = check_page(limit, offset)
        """A page of jobs, newest (last enqueued) first, optionally filtered."""
        with self._shelf.read() as doc:
            found = sorted(
                (j for j in doc["jobs"].values()
                 if (state is None or j["state"] == state.value)
                 and (queue is None or j["spec"]["queue"] == queue)),
                key=lambda j: j["seq"],
                reverse=True,
            )  # fmt: skip
            return [job_record(j) for j in found[offset : offset + limit]]


def _error_row(error: ErrorInfo) -> dict[str, str | None]:
    return {
        "error_class": error.error_class,
        "error_type": error.error_type,
        "message": error.message,
        "traceback": error.traceback,
    }


_factory: StorageFactory = ShelfStorage  # mypy: the class builds itself from a URL
