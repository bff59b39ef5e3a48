"""Dead letters (list, get, retry, purge), per-queue stats and pending counts, the job scan
(``SupportsJobScan``) and retention (``prune``) on Redis, each one Lua script or one read.

On a Redis Cluster each of them visits the homes it concerns (``backends/redis/homes.py``)
and merges their answers: pages of dead letters by dead time and of jobs by enqueue
sequence (both read ``offset + limit`` from each home), counts by queue. A dead-letter id
names the home of its entry; a retry whose replay belongs in another home (``queue`` moves
it) marks the entry (``dead_take.lua``), stores the replay through ``enqueue`` and then
removes the entry (``dead_drop.lua``), so concurrent retries still yield one new job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from backends.redis.enqueue import RedisEnqueue
from backends.redis.errors import translate_errors
from backends.redis.jobs import RedisJobs
from backends.redis.pauses import pause_arg
from backends.redis.records import DEAD_FIELDS, dead_job, opt
from backends.redis.store import RedisStore
from queue_core.records.errors import NotFound
from queue_core.records.jobs import DeadJob, JobRecord, JobState, NewJob, QueueStats
from queue_core.rules.outcomes import replay_job
from queue_core.rules.paging import check_page
from queue_core.storage.job_ids import new_job_id

__all__ = ["RedisAdmin"]

_PURGE_BATCH = 1000
_STALE_MARK_MS = 60_000
"""A retry's mark on a dead-letter entry (``dead_take.lua``) older than this, whose replay
was never stored, is taken over by the next retry (its caller died in between)."""


def _spec(f: Sequence[bytes]) -> NewJob:
    """The job as enqueued, from ``dead_take.lua``'s values (``b''`` = none)."""
    tn, q, pl, pr, ma, ld, to, hb, ss, ck, cl, csk, op, ro, rk, rl, rw = f

    def num(v: bytes) -> int | None:
        return int(v) if v else None

    def text(v: bytes) -> str | None:
        return v.decode() if v else None

    return NewJob(
        id="", task_name=tn.decode(), queue=q.decode(), payload=pl, priority=int(pr),
        max_attempts=int(ma), lost_delay_ms=int(ld), timeout_ms=num(to), heartbeat_ms=num(hb),
        schedule_to_start_ms=num(ss), concurrency_key=text(ck), concurrency_limit=num(cl),
        concurrency_skip=csk == b"1", options=text(op), replay_of=text(ro), rate_key=text(rk),
        rate_limit=num(rl), rate_window_ms=num(rw),
    )  # fmt: skip


class RedisAdmin:
    """The administrative operations of one store (``jobs`` reads the records it lists,
    ``enqueuing`` stores a replay that moves to another home)."""

    def __init__(
        self,
        store: RedisStore,
        jobs: RedisJobs,
        enqueuing: RedisEnqueue,
        retry_step: Callable[[str, int | None], str],
    ) -> None:
        self.store = store
        self.jobs = jobs
        self.enqueuing = enqueuing
        self.retry_step = retry_step
        """``retry_dead`` of a flow step's entry (``RedisWorkflows.retry_dead_step``)."""
        s = store.script
        self._list_dead, self._retry_dead, self._purge_dead = (
            s("list_dead"),
            s("retry_dead"),
            s("purge_dead"),
        )
        self._stats, self._count_pending, self._prune = s("stats"), s("count_pending"), s("prune")
        self._list_jobs = s("list_jobs")

    def _homes(self) -> list[str | None]:
        """The homes an operation on every job visits (``None``: the storage's own)."""
        return list(self.store.homes.all()) if self.store.cluster else [None]

    # ------------------------------------------------------------------ dead letters

    def list_dead(self, limit: int, offset: int, task_name: str | None) -> list[DeadJob]:
        """``Storage.list_dead``: a page, newest first."""
        limit, offset = check_page(limit, offset)
        offset = max(offset, 0)
        rows: list[tuple[int, bytes, str, list[Any]]] = []
        homes = self._homes()
        for home in homes:
            args = self.store.args(None, home)
            if home is None:
                args += (offset, limit, opt(task_name))
            else:  # the page is cut from the merged first offset + limit of every home
                args += (0, offset + limit, opt(task_name))
            with translate_errors("list_dead"):
                r = self.store.call(self._list_dead, args)
            for i in range(0, len(r), 11):
                f = r[i + 1 : i + 11]
                rows.append((int(f[8]), r[i], home or "", f))
        if homes != [None]:
            rows.sort(key=lambda row: (row[0], row[1]), reverse=True)
            rows = rows[offset : offset + max(limit, 0)]
        out: list[DeadJob] = []
        for _, did, home, f in rows:
            suffix = self.store.homes.suffix(home, f[2].decode()) if home else ""
            out.append(dead_job(did.decode() + suffix, f))
        return out

    def get_dead(self, dead_id: str) -> DeadJob | None:
        """``Storage.get_dead``."""
        self.store.args(None)  # refused once closed
        stored, home = self.store.homes.split(dead_id)
        with translate_errors("get_dead"):
            f = self.store.client.hmget(self.store.keys.dead(stored, home), DEAD_FIELDS)
        return None if f[0] is None else dead_job(dead_id, f)

    def retry_dead(self, dead_id: str, queue: str | None, now: int | None) -> str:
        """``Storage.retry_dead``: the entry's job again under a new id; a flow step's
        entry resumes its execution (:attr:`retry_step`), its step's job id."""
        new_id = new_job_id()
        stored, home = self.store.homes.split(dead_id)
        if not self.store.cluster:
            took = self._retry_here(dead_id, stored, None, new_id, queue, now)
        else:
            homes = self.store.homes
            with translate_errors("retry_dead"):
                q, ck, rk = self.store.client.hmget(
                    self.store.keys.dead(stored, home), ["q", "ck", "rk"]
                )
            if q is None:
                raise NotFound(f"no dead-letter entry with id {dead_id!r}")
            target = queue if queue is not None else q.decode()
            there = homes.shared if ck or rk else homes.of_queue(target)
            took = -2
            if there == home:
                homes.prepare([(home, target)])
                homes.reserve([(new_id, home)])
                try:
                    took = self._retry_here(dead_id, stored, home, new_id, queue, now)
                finally:
                    if took != 1:
                        homes.drop([new_id])
            if took == -2:  # the replay moves to another home, or another retry marked it
                return self._retry_across(dead_id, stored, home, new_id, queue, now)
        if took == -1:
            return self.retry_step(dead_id, now)
        if not took:
            raise NotFound(f"no dead-letter entry with id {dead_id!r}")
        return new_id

    def _retry_here(
        self,
        dead_id: str,
        stored: str,
        home: str | None,
        new_id: str,
        queue: str | None,
        now: int | None,
    ) -> int:
        """``retry_dead.lua``: the entry and its replay in one home, one atomic step."""
        args = self.store.args(now, home)
        args += (stored, new_id, opt(queue), dead_id)
        with translate_errors("retry_dead"):
            return int(self.store.call(self._retry_dead, args))

    def _retry_across(
        self, dead_id: str, stored: str, home: str, new_id: str, queue: str | None, now: int | None
    ) -> str:
        """``retry_dead`` whose replay is stored in another home than the entry (see the
        module doc)."""
        take, drop = self.store.script("dead_take"), self.store.script("dead_drop")
        t = self.store.now(now)
        replace = ""
        for _ in range(3):
            args = self.store.args(t, home)
            args += (stored, new_id, replace)
            with translate_errors("retry_dead"):
                r = self.store.call(take, args)
            if r == -1:  # a flow step's entry (in the shared home): its execution resumes
                return self.retry_step(dead_id, now)
            if r == 0:
                break
            if r[0] == b"taken":
                mark = r[1].decode()
                other, _, at = mark.rpartition("|")
                if self.jobs.read_jobs([other]):  # that retry stored its replay: finish it
                    with translate_errors("retry_dead"):
                        self.store.call(drop, [*self.store.args(t, home), stored, mark])
                    break
                if t - int(at) < _STALE_MARK_MS:
                    break
                replace = mark  # its retry died before storing the replay: take it over
                continue
            mark = r[1].decode()
            spec = _spec(r[2:])
            job = replay_job(spec, dead_id=dead_id, new_id=new_id, queue=queue, now=t)
            self.enqueuing.enqueue([job], t)
            with translate_errors("retry_dead"):
                self.store.call(drop, [*self.store.args(t, home), stored, mark])
            return new_id
        raise NotFound(f"no dead-letter entry with id {dead_id!r}")

    def purge_dead(self, task_name: str | None, before: int | None) -> int:
        """``Storage.purge_dead``, in batches of 1,000 entries, each batch atomic."""
        total = 0
        for home in self._homes():
            args = self.store.args(None, home)
            args += (opt(task_name), opt(before), _PURGE_BATCH)
            with translate_errors("purge_dead"):
                while True:
                    n = int(self.store.call(self._purge_dead, args))
                    total += n
                    if n < _PURGE_BATCH:
                        break
        return total

    # ------------------------------------------------------------------ retention, counts

    def prune(self, now: int | None, limit: int) -> int:
        """``Storage.prune`` (finished flow executions go with the same cutoff); on a
        cluster home by home until ``limit``, dropping the pruned jobs' directory entries."""
        if limit <= 0:
            return 0
        total = 0
        for home in self._homes():
            if total >= limit:
                break
            args = self.store.args(now, home)
            args.append(limit - total)
            with translate_errors("prune"):
                ids = [i.decode() for i in self.store.call(self._prune, args)]
            if home is not None:
                self.store.homes.forget(ids, home)
            total += len(ids)
        return total

    def count_pending(self, queues: Sequence[str], horizon_ms: int, now: int | None) -> int:
        """``Storage.count_pending`` (on a cluster: the queues' homes and the shared one)."""
        if not queues:
            return 0
        names = list(dict.fromkeys(queues))
        groups: dict[str | None, list[str]] = {None: names}
        if self.store.cluster:
            homes = self.store.homes
            groups = {h: qs for h, qs in homes.groups(names).items()}
            groups[homes.shared] = names
        total = 0
        for home, qs in groups.items():
            args = self.store.args(now, home)
            args.append(horizon_ms)
            args += qs
            if home is not None:  # a cluster's home: the pauses last
                args.append(pause_arg(self.store, home, "count_pending"))
            with translate_errors("count_pending"):
                total += int(self.store.call(self._count_pending, args))
        return total

    def stats(self, now: int | None) -> list[QueueStats]:
        """``Storage.stats``, sorted by queue (on a cluster, each queue summed over homes)."""
        t = now
        if self.store.cluster and now is None:
            t = self.store.now(None)  # one clock for every home's ready/scheduled split
        merged: dict[str, dict[str, int]] = {}
        for home in self._homes():
            with translate_errors("stats"):
                rows = self.store.call(self._stats, self.store.args(t, home))
            for row in rows:
                c = merged.setdefault(row[0].decode(), {})
                c["scheduled"] = c.get("scheduled", 0) + int(row[1])
                for i in range(2, len(row), 2):
                    name = row[i].decode()
                    c[name] = c.get(name, 0) + int(row[i + 1])
        out: list[QueueStats] = []
        for queue in sorted(merged):
            counts = merged[queue]
            queued = counts.pop("queued", 0)
            scheduled = counts.pop("scheduled")
            if queued or scheduled or any(counts.values()):
                out.append(
                    QueueStats(queue=queue, ready=queued - scheduled, scheduled=scheduled, **counts)
                )
        return out

    def list_jobs(
        self, state: JobState | None, queue: str | None, limit: int, offset: int
    ) -> list[JobRecord]:
        """``SupportsJobScan.list_jobs``: a page, newest first; a filtered page scans jobs
        from the newest until it is full (for dashboards and the CLI, not hot paths)."""
        limit, offset = check_page(limit, offset)
        offset, limit = max(offset, 0), max(limit, 0)
        homes = self._homes()
        if self.store.cluster and queue is not None:
            homes = [self.store.homes.of_queue(queue), self.store.homes.shared]
        rows: list[tuple[float, str, str | None]] = []
        for home in homes:
            args = self.store.args(None, home)
            args += ("" if state is None else state.value, opt(queue))
            if home is None:
                args += (offset, limit)
            else:  # the page is cut from the merged first offset + limit of every home
                args += (0, offset + limit)
            with translate_errors("list_jobs"):
                r = self.store.call(self._list_jobs, args)
            rows += ((float(r[i + 1]), r[i].decode(), home) for i in range(0, len(r), 2))
        if homes != [None]:
            rows.sort(key=lambda row: (row[0], row[1]), reverse=True)
            rows = rows[offset : offset + limit]
        ids = [i for _, i, _ in rows]
        where = [h or self.store.homes.shared for _, _, h in rows]
        return self.jobs.read_jobs(ids, where)
