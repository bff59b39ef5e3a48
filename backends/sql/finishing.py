"""Finishing attempts on the SQL backend: fenced ends, dead letters, and a step's end
applied with its execution's decision in the same transaction.

The state and job reason of each end come from :func:`~queue_core.rules.outcomes.end_state`
(:func:`~backends.sql.records.end_values`). A batch's fenced updates of jobs and attempt
records run as one statement (PostgreSQL) or two (SQLite) per round, rows taken in job
id order; a job named twice in one batch goes to a second round (its first end has
cleared the lease, so the second is refused unless the first was). ``DEAD`` ends get
their dead-letter entries in the same transaction.

The batch statement takes plain jobs only (``execution_id IS NULL``). The ends of flow
steps' jobs are known from the claim (:attr:`Store.claimed_steps`), or, for an end the
batch statement did not take (stale, or claimed through another storage), from the job's
stored execution (one indexed read): no rule on the shape of job ids is needed. The
ends of each execution are finished in one transaction of their own: the execution
locked first (:meth:`Flows.open`), the ends fenced, then the flows part decides and
applies them (:meth:`Flows.ended`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from backends.sql.admin import Admin
from backends.sql.progress import Progresses
from backends.sql.records import EndRow, end_values
from backends.sql.store import Store
from queue_core.records.jobs import AttemptEnd, LeaseRef
from queue_core.storage.claims import started_ago

if TYPE_CHECKING:
    from backends.sql.flows import Flows

__all__ = ["Finishing"]

Starts = tuple[Sequence[LeaseRef], Sequence[int]] | None
"""Held attempts' starts told with a batch of ends: ``(refs, ago_ms)`` (SupportsPrefetch)."""


class Finishing:
    """``finish`` on ``store``; dead letters through ``admin``, step ends through
    ``flows()`` (built on first use), the progress an end carries through ``progress``."""

    def __init__(
        self, store: Store, admin: Admin, flows: Callable[[], Flows], progress: Progresses
    ) -> None:
        self.store = store
        self.admin = admin
        self.flows = flows
        self.progress = progress

    def finish(
        self, ends: Sequence[AttemptEnd], *, now: int | None = None, started: Starts = None
    ) -> list[bool]:
        """See :meth:`queue_core.storage.protocol.Storage.finish`; with ``started``, see
        :meth:`queue_core.storage.abilities.SupportsStartWithFinish.start_and_finish`: a
        start whose end is in the batch goes with the end (``EndRow.started_ago``: the
        finish statements store it, on the job and its attempt record); the others are
        started in the plain ends' transaction where the dialect writes a batch in more
        than one statement (SQLite: one write transaction, not two), else first."""
        values = [end_values(e) for e in ends]
        if started is not None:
            started = _fold(values, started)
        d = self.store.dialect
        if started is not None and (d.single_statement_batches or not ends):
            self.start_claimed(*started, now=now)
            started = None
        if not ends:
            return []
        claimed = self.store.claimed_steps
        steps = {i: claimed.pop(e.ref.job_id) for i, e in enumerate(ends)
                 if e.ref.job_id in claimed} if claimed else {}  # fmt: skip
        if not steps:
            took = self._plain(ends, values, now, started)
            if all(took):  # the plain batch: every end taken
                return took
        else:
            took = [False] * len(ends)
            plain = [i for i in range(len(ends)) if i not in steps]
            if plain:
                ok = self._plain([ends[i] for i in plain], [values[i] for i in plain], now, started)
                took = _spread(len(ends), plain, ok)
            elif started is not None:
                self.start_claimed(*started, now=now)
        if not all(took[i] or i in steps for i in range(len(ends))):
            steps.update(self._look_up(ends, took, steps))
        return self._steps(ends, values, took, steps, now) if steps else took

    def start_claimed(
        self, refs: Sequence[LeaseRef], ago_ms: Sequence[int] = (), *, now: int | None = None
    ) -> list[bool]:
        """See :meth:`queue_core.storage.abilities.SupportsPrefetch.start_claimed`: in a
        write of its own."""
        if not refs:
            return []
        store, d = self.store, self.store.dialect
        with store.stmt() if d.single_statement_batches else store.tx() as cur:
            return d.start_claimed(cur, refs, started_ago(refs, ago_ms), d.clock(now))

    def give_back(self, refs: Sequence[LeaseRef], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.abilities.SupportsGiveBack.give_back`: in one
        transaction, the current held rows read and locked (``give_back_rows``, which
        says which jobs are refused), then queued again (``give_back``, which says what
        is undone); idle workers are woken when a job is. A ref named twice is given back
        once (its first flag). ``now`` is not read: a give-back writes no time (the job
        keeps its own ready time, place and expiry)."""
        if not refs:
            return []
        store = self.store
        keys = [f"{r.attempt}:{r.lease_token}:{r.job_id}" for r in refs]
        params = {"ids": store.array(sorted({r.job_id for r in refs})),
                  "refs": store.array(sorted(set(keys)))}  # fmt: skip
        with store.tx() as cur:
            rows = cur.execute(store.q["give_back_rows"], params).fetchall()
            if rows:
                seqs = store.array([int(r["seq"]) for r in rows])
                cur.execute(store.q["give_back"], {"seqs": seqs})
                store.notify(cur)
        current = {f"{r['attempt']}:{r['lease_token']}:{r['id']}" for r in rows}
        took = []
        for k in keys:
            took.append(k in current)
            current.discard(k)
        return took

    def _plain(
        self, ends: Sequence[AttemptEnd], values: list[EndRow], now: int | None, started: Starts
    ) -> list[bool]:
        store, d = self.store, self.store.dialect
        t = d.clock(now)
        rounds = _rounds(ends)
        dead = any(v.dead_id is not None for v in values)
        reports = any(e.progress is not None for e in ends)
        atomic = dead or reports or len(rounds) > 1 or not d.single_statement_batches
        took = [False] * len(ends)
        wake = False
        with store.tx() if atomic or started else store.hot() as cur:
            if started is not None and started[0]:
                d.start_claimed(cur, started[0], started_ago(*started), t)
            for idx in rounds:
                done = d.finish_batch(cur, [values[i] for i in idx], t)
                for i in idx:
                    took[i] = ends[i].ref.job_id in done
                    wake = wake or (took[i] and values[i].requeue)
                wake = wake or any(k is not None for k in done.values())
            if dead:
                graves = [(e.ref.job_id, v.dead_id, v.reason or "", e.error)
                          for e, v, ok in zip(ends, values, took, strict=True)
                          if ok and v.dead_id is not None]  # fmt: skip
                self.admin.bury(cur, graves)
            if reports:
                self._reports(cur, ends, took, t)
            if wake:
                store.notify(cur)
        return took

    def _reports(
        self, cur: Any, ends: Sequence[AttemptEnd], took: Sequence[bool], now: int | None
    ) -> None:
        """Store the progress carried by the ends taken (SupportsProgress)."""
        self.progress.record(
            cur,
            [(e.ref.job_id, e.progress) for e, ok in zip(ends, took, strict=True)
             if ok and e.progress is not None],
            now,
        )  # fmt: skip

    def _look_up(
        self, ends: Sequence[AttemptEnd], took: list[bool], steps: dict[int, tuple[str, str]]
    ) -> dict[int, tuple[str, str]]:
        """The ends neither taken nor known as steps' that are flow steps' ends (by their
        job's stored execution): ``{index: (execution id, step id)}``."""
        left = [i for i in range(len(ends)) if not took[i] and i not in steps]
        ids = self.store.array([ends[i].ref.job_id for i in left])
        rows = self.store.fetch("flow_jobs_of", {"ids": ids})
        found = {r["id"]: (r["execution_id"], r["step_id"]) for r in rows if r["execution_id"]}
        return {i: found[ends[i].ref.job_id] for i in left if ends[i].ref.job_id in found}

    def _steps(
        self,
        ends: Sequence[AttemptEnd],
        values: list[EndRow],
        took: list[bool],
        steps: dict[int, tuple[str, str]],
        now: int | None,
    ) -> list[bool]:
        """The ends of flow steps' jobs, each execution's in one transaction."""
        by_exec: dict[str, list[int]] = {}
        for i in sorted(steps):
            by_exec.setdefault(steps[i][0], []).append(i)
        took = list(took)
        for eid, idx in by_exec.items():
            items = [(ends[i], values[i], steps[i][1]) for i in idx]
            for i, ok in zip(idx, self._of_execution(eid, items, now), strict=True):
                took[i] = ok
        return took

    def _of_execution(
        self, eid: str, items: list[tuple[AttemptEnd, EndRow, str]], now: int | None
    ) -> list[bool]:
        """The ends (with their step ids) of one execution's step jobs, in one transaction.

        Ends that commute (:meth:`Flows.commute`: successes and retries of distinct jobs
        that the fast rule decides) are fenced in one statement, then decided together;
        otherwise each is fenced just before its decision, so that a decision that ends
        another step's job (a deadline, a failure) refuses that job's later end.
        """
        from queue_core.records.workflows import SuspendedEnd  # with the first step end

        flows, store, d = self.flows(), self.store, self.store.dialect
        values = [v for _, v, _ in items]
        with store.tx_pipelined() as cur:
            x = flows.open(cur, eid, now)
            t = x.t if x is not None else store.resolve_now(cur, now)
            ids = {v.id for v in values}
            if (
                x is not None
                and not any(isinstance(e, SuspendedEnd) for e, _, _ in items)
                and len(ids) == len(values)
                and flows.commute(x, [v.state for v in values])
            ):
                flows.preload(x, [(sid, v.state) for _, v, sid in items])  # with the finish
                done = d.finish_batch(cur, values, t, steps=True)
                took = [v.id in done for v in values]
                pairs = zip(items, took, strict=True)
                flows.ended(x, [_ended(v, sid) for (_, v, sid), ok in pairs if ok])
                # successes release through Flows._release, which wakes the workers
                # itself; a retry or a freed concurrency slot wakes them here
                wake = any(ok and v.requeue for v, ok in zip(values, took, strict=True))
                wake = wake or any(k is not None for k in done.values())
            else:
                took, wake = [], True
                for e, v, sid in items:
                    took.append(v.id in d.finish_batch(cur, [v], t, steps=True))
                    if took[-1] and v.dead_id is not None:
                        self.admin.bury(cur, [(v.id, v.dead_id, v.reason or "", e.error)])
                    if took[-1] and x is not None and isinstance(e, SuspendedEnd):
                        flows.suspended(x, e.suspension)  # a workflow's function stopped
                    elif took[-1] and x is not None:
                        flows.ended(x, [_ended(v, sid)])
            if any(took):
                self._reports(cur, [e for e, _, _ in items], took, t)
                if wake:
                    store.notify(cur)
        return took


def _fold(values: list[EndRow], started: tuple[Sequence[LeaseRef], Sequence[int]]) -> Starts:
    """Give each end of ``values`` whose attempt is among ``started`` its start
    (``started_ago``, in place); the starts left, or ``None``."""
    refs, ago_ms = started
    ago = {(r.job_id, r.attempt, r.lease_token): a
           for r, a in zip(refs, started_ago(refs, ago_ms), strict=True)}  # fmt: skip
    for i, v in enumerate(values):
        a = ago.pop((v.id, v.attempt, v.token), None)
        if a is not None:
            values[i] = v._replace(started_ago=a)
    if not ago:
        return None
    left = list(ago.items())
    return [LeaseRef(*k) for k, _ in left], [a for _, a in left]


def _spread(n: int, idx: list[int], values: list[bool]) -> list[bool]:
    """``n`` flags, ``values`` at the indexes ``idx``, ``False`` elsewhere."""
    out = [False] * n
    for i, v in zip(idx, values, strict=True):
        out[i] = v
    return out


def _ended(v: EndRow, step_id: str) -> tuple[str, str, str | None]:
    """A fenced end as the step's event: (step id, the job's new state, its reason)."""
    return step_id, v.state, v.reason


def _rounds(ends: Sequence[AttemptEnd]) -> list[list[int]]:
    """Indexes of ``ends`` in job id order (the lock order), split so that each round
    names a job once."""
    ids = [e.ref.job_id for e in ends]
    order = sorted(range(len(ids)), key=ids.__getitem__)
    if len(set(ids)) == len(ids):
        return [order]
    rounds: list[list[int]] = []
    seen: dict[str, int] = {}
    for i in order:
        k = seen.get(ids[i], 0)
        seen[ids[i]] = k + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(i)
    return rounds
