"""A job's life on Redis after enqueue and claim: lease renewal, heartbeat, finish, the
reaper, cancel, and reading a job back; a held attempt's start and give-back
(``SupportsPrefetch.start_claimed``, ``SupportsGiveBack.give_back``).

Each change is one Lua script (``renew.lua``, ``heartbeat.lua``, ``finish.lua``,
``reap.lua``, ``cancel.lua``, ``start.lua``, ``give_back.lua``); this part packs their
arguments and decodes their replies.
A step job's end is recorded by the same script as an event of its execution, and the
script returns the execution's id: the part then hands those ids to the flows part
(:meth:`backends.redis.flows.RedisFlows.advance_ends`), an explicit call, which judges
them. The reaper first lets the flows part time out executions past their deadline, then
reaps jobs, then has it advance what is left pending (``reap.lua`` says which).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from backends.redis import progress
from backends.redis.errors import translate_errors
from backends.redis.records import (
    STATES,
    attempt_from_json,
    job_record,
    opt,
    reaped_jobs,
    running_attempt,
    with_last,
)
from backends.redis.store import RedisStore
from queue_core.records.errors import LeaseLost, NotFound
from queue_core.records.jobs import (
    AttemptEnd,
    AttemptRecord,
    JobRecord,
    JobState,
    LeaseRef,
    ReapedJob,
    RenewResult,
)
from queue_core.rules.outcomes import end_state
from queue_core.storage.claims import started_ago

if TYPE_CHECKING:
    from backends.redis.flows import Head, RedisFlows
    from backends.redis.fold_reads import Asked
    from queue_core.records.workflows import SuspendedEnd

__all__ = ["RedisJobs"]


def _start_values(ref: LeaseRef, token: str, ago: int) -> tuple[str, int, str, int]:
    """A held attempt's start as ``start.lua`` and ``finish.lua`` take it."""
    return (ref.job_id, ref.attempt, token, ago)


def _suspended(end: AttemptEnd) -> bool:
    """A workflow function's suspended end (its module loads with the first one seen)."""
    from queue_core.records.workflows import SuspendedEnd

    return isinstance(end, SuspendedEnd)


class RedisJobs:
    """Renew, heartbeat, finish, reap, cancel and reads of one store; ``flows`` gives the
    flows part (built on first use) for the step ends these record."""

    def __init__(
        self,
        store: RedisStore,
        flows: Callable[[], RedisFlows],
        suspend: Callable[[SuspendedEnd, int | None], bool],
        built_flows: Callable[[], RedisFlows | None] = lambda: None,
    ) -> None:
        self.store = store
        self.flows = flows
        self.built_flows = built_flows
        """The flows part if it was built (no build: a worker of plain jobs never loads
        the flow modules)."""
        self.suspend = suspend
        """A workflow function's suspended end (``RedisWorkflows.suspend``)."""
        self._renew = store.script("renew")
        self._start: Any = None  # start.lua, registered on first use (SupportsPrefetch)
        self._give_back: Any = None  # give_back.lua, registered on first use
        self._heartbeat = store.script("heartbeat")
        self._finish = store.script("finish")
        self._reap = store.script("reap")
        self._cancel = store.script("cancel")
        self._info_cache: dict[tuple[str, str | None, str], str] = {}
        self._turn = 0

    def _by_home(self, tokens: Sequence[str]) -> dict[str, list[tuple[int, str]]]:
        """On a cluster: home -> ``(position, token as stored)`` of each lease token."""
        out: dict[str, list[tuple[int, str]]] = {}
        for k, token in enumerate(tokens):
            stored, home = self.store.homes.split(token)
            out.setdefault(home, []).append((k, stored))
        return out

    def renew(self, refs: Sequence[LeaseRef], lease_ms: int, now: int | None) -> RenewResult:
        """``Storage.renew``: one ``renew.lua`` call for every ref (on a cluster, per home)."""
        if not refs:
            return RenewResult()
        if self.store.cluster:
            codes: list[int] = [0] * len(refs)
            for home, part in self._by_home([r.lease_token for r in refs]).items():
                args = self.store.args(now, home)
                args.append(lease_ms)
                for k, token in part:
                    args += (refs[k].job_id, refs[k].attempt, token)
                with translate_errors("renew"):
                    got = self.store.run(self._renew, args)
                for (k, _), c in zip(part, got, strict=True):
                    codes[k] = c
        else:
            args = self.store.args(now)
            args.append(lease_ms)
            for ref in refs:
                args += (ref.job_id, ref.attempt, ref.lease_token)
            with translate_errors("renew"):
                codes = self.store.run(self._renew, args)
        # 0: not current, 1: current, 2: current and asked to cancel
        return RenewResult.of(refs, [None if c == 0 else c == 2 for c in codes])

    def start_claimed(
        self, refs: Sequence[LeaseRef], ago_ms: Sequence[int], now: int | None
    ) -> list[bool]:
        """``SupportsPrefetch.start_claimed``: one ``start.lua`` call (on a cluster, per
        home)."""
        if not refs:
            return []
        if self._start is None:
            self._start = self.store.script("start")
        ago = started_ago(refs, ago_ms)
        return self._per_ref(
            self._start,
            "start_claimed",
            refs,
            now,
            lambda k, token: _start_values(refs[k], token, ago[k]),
        )

    def give_back(self, refs: Sequence[LeaseRef], now: int | None) -> list[bool]:
        """``SupportsGiveBack.give_back``: one ``give_back.lua`` call (on a cluster, per
        home)."""
        if not refs:
            return []
        if self._give_back is None:
            self._give_back = self.store.script("give_back")
        return self._per_ref(
            self._give_back,
            "give_back",
            refs,
            now,
            lambda k, token: (refs[k].job_id, refs[k].attempt, token),
        )

    def _per_ref(
        self,
        script: Any,
        op: str,
        refs: Sequence[LeaseRef],
        now: int | None,
        values: Callable[[int, str], tuple[Any, ...]],
    ) -> list[bool]:
        """Run ``script``, fenced per ref, with ``values(k, token as stored)`` for each of
        ``refs`` (on a cluster, once per home, each ref in the home its token names);
        whether each ref was current (the script's 1 per ref)."""
        if not self.store.cluster:
            args = self.store.args(now)
            for k, ref in enumerate(refs):
                args += values(k, ref.lease_token)
            with translate_errors(op):
                return [c == 1 for c in self.store.run(script, args)]
        out = [False] * len(refs)
        for home, part in self._by_home([r.lease_token for r in refs]).items():
            args = self.store.args(now, home)
            for k, token in part:
                args += values(k, token)
            with translate_errors(op):
                got = self.store.run(script, args)
            for (k, _), c in zip(part, got, strict=True):
                out[k] = c == 1
        return out

    def heartbeat(self, ref: LeaseRef, now: int | None) -> bool:
        """``Storage.heartbeat``."""
        token, home = self.store.homes.split(ref.lease_token)
        args = self.store.args(now, home if self.store.cluster else None)
        args += (ref.job_id, ref.attempt, token)
        with translate_errors("heartbeat"):
            code = self.store.run(self._heartbeat, args)
        if code < 0:
            raise LeaseLost(f"attempt {ref.attempt} of job {ref.job_id} is not current")
        return bool(code)

    def _info(self, end: AttemptEnd) -> str:
        """The attempt record's last 7 values (JSON), cached for the common error-free ends."""
        err = end.error
        if err is None:
            key = (end.outcome.value, end.reason, end.mode)
            cached = self._info_cache.get(key)
            if cached is None:
                cached = json.dumps([key[0], key[1], None, None, None, None, key[2]])
                if len(self._info_cache) < 256:
                    self._info_cache[key] = cached
            return cached
        info = [end.outcome.value, end.reason, err.error_class, err.error_type, err.message]
        return json.dumps([*info, err.traceback, end.mode])

    def finish(
        self,
        ends: Sequence[AttemptEnd],
        now: int | None,
        started: tuple[Sequence[LeaseRef], Sequence[int]] = ((), ()),
    ) -> list[bool]:
        """``Storage.finish``: one ``finish.lua`` call (each end fenced on its own; on a
        cluster one per home), then the flows part advances the executions of the step
        jobs that ended. ``started``: the refs of held attempts whose bodies started and
        how long ago (``SupportsStartWithFinish.start_and_finish``), stored by the same
        call before the ends: one round trip instead of ``start.lua``'s and this one."""
        refs, ago_ms = started
        if not ends and not refs:
            return []
        for end in ends:
            if end.__class__ is not AttemptEnd and _suspended(end):  # a workflow's
                self.start_claimed(refs, ago_ms, now)
                return self._finish_suspended(ends, now)
        ago = started_ago(refs, ago_ms)
        asked: dict[str, Asked] = {}
        reads: list[str | int] = [0]
        built = self.built_flows()
        if built is not None:  # a step index may be known: name the advance's reads
            from backends.redis import fold_reads

            asked = fold_reads.asked_for(ends, built.known_index)
            reads = fold_reads.argv(asked)
        if self.store.cluster:
            took: list[Any] = [0] * len(ends)
            by_home = self._by_home([e.ref.lease_token for e in ends])
            starts_by_home = self._by_home([r.lease_token for r in refs])
            for home in {**starts_by_home, **by_home}:
                part = by_home.get(home, [])
                starts = [
                    _start_values(refs[k], t, ago[k]) for k, t in starts_by_home.get(home, [])
                ]
                got = self._finish_in(
                    home, [ends[k] for k, _ in part], [t for _, t in part], now, starts, reads
                )
                for (k, _), x in zip(part, got, strict=True):
                    took[k] = x
        else:
            starts = [_start_values(ref, ref.lease_token, ago[k]) for k, ref in enumerate(refs)]
            tokens = [e.ref.lease_token for e in ends]
            took = self._finish_in(None, ends, tokens, now, starts, reads)
        ended: list[str] = []  # executions of step ends, each with its head as finish read it
        heads: dict[str, Head] = {}
        at = now  # when the ends were recorded (finish.lua's clock with the heads)
        for x in took:
            if isinstance(x, list):
                eid = x[0].decode()
                ended.append(eid)
                a = asked.get(eid)
                pre = None if a is None or len(x) < 6 else a.prefetched(x[4], x[5])
                heads[eid] = (x[1], x[2], pre)
                at = int(x[3]) if at is None else at
            elif isinstance(x, bytes):
                ended.append(x.decode())
        if ended:
            self.flows().advance_ends(ended, at, heads)
        return [x != 0 for x in took]

    def _finish_in(
        self,
        home: str | None,
        ends: Sequence[AttemptEnd],
        tokens: Sequence[str],
        now: int | None,
        starts: Sequence[tuple[str, int, str, int]] = (),
        reads: Sequence[str | int] = (0,),
    ) -> list[Any]:
        """``finish.lua`` for ``ends`` (with their tokens as stored) in ``home``, after
        ``starts`` (``start.lua``'s values: job id, attempt, token as stored, ms ago);
        ``reads``: the step fields to read with the heads (:func:`fold_reads.argv`)."""
        args = self.store.args(now, home)
        args.append(len(starts))
        for start in starts:
            args += start
        args += reads
        for end, token in zip(ends, tokens, strict=True):
            ref, d, err = end.ref, end.decision, end.error
            state, job_reason = end_state(d, end.reason)
            args += (
                ref.job_id,
                ref.attempt,
                token,
                state.value,
                d.delay_ms,
                opt(d.lost_delay_ms),
                opt(job_reason),
                "0" if end.result is None else "1",
                b"" if end.result is None else end.result,
                self._info(end),
                "" if err is None else err.message,
                "" if err is None else err.error_class,
                "0" if d.spends_attempt else "1",  # refund: max_attempts + 1 (finish.lua)
                "" if end.progress is None else progress.encode(end.progress),
            )
        with translate_errors("finish"):
            return list(self.store.run(self._finish, args))

    def _finish_suspended(self, ends: Sequence[AttemptEnd], now: int | None) -> list[bool]:
        """``finish`` of a batch holding suspended ends: each of those with its plan
        (:meth:`suspend`), the others in one ``finish.lua`` call."""
        from queue_core.records.workflows import SuspendedEnd

        plain = [end for end in ends if not isinstance(end, SuspendedEnd)]
        took = iter(self.finish(plain, now))
        return [
            self.suspend(end, now) if isinstance(end, SuspendedEnd) else next(took) for end in ends
        ]

    def reap(self, now: int | None, limit: int) -> list[ReapedJob]:
        """``Storage.reap``: executions past their deadline first (their running steps end
        ``timed_out``/``flow_timeout``, not reaped as lost), then ``reap.lua``'s running
        attempts and schedule-to-start expiries, then the executions left to advance. On
        a cluster the other homes follow the shared one (which holds the flows), until
        ``limit`` jobs are reaped."""
        if limit <= 0:
            return []
        homes = self.store.homes
        homes.adopt()
        reaped = self._reap_shared(now, limit)
        if self.store.cluster:
            others = homes.all()[1:]
            self._turn += 1  # each reap starts at another home: none waits behind the rest
            k = self._turn % len(others) if others else 0
            for home in others[k:] + others[:k]:
                if len(reaped) >= limit:
                    break
                args = self.store.args(now, home)
                args += (limit - len(reaped), "1", 0)
                with translate_errors("reap"):
                    r = self.store.call(self._reap, args)
                reaped += reaped_jobs(r[0])
        return reaped

    def _reap_shared(self, now: int | None, limit: int) -> list[ReapedJob]:
        """``reap`` in the storage's own home, with the flows."""
        args = self.store.args(now)
        args += (limit, "", limit)
        with translate_errors("reap"):
            r = self.store.call(self._reap, args)
        first: list[ReapedJob] = []
        if r[0] == b"x":  # executions past their deadline, at the script's clock r[1]
            t = int(r[1])
            first = self.flows().reap([e.decode() for e in r[2]], [], t)
            args = self.store.args(t)
            args += (max(limit - len(first), 0), "1", limit)
            with translate_errors("reap"):
                r = self.store.call(self._reap, args)
        jobs, t, pending, keys = r
        reaped = first + reaped_jobs(jobs)
        if pending or keys:
            reaped += self.flows().reap(
                [e.decode() for e in pending], [k.decode() for k in keys], int(t)
            )
        return reaped

    def cancel(self, job_id: str, now: int | None) -> JobState:
        """``Storage.cancel``: one ``cancel.lua`` call (a step job's execution advanced after)."""
        self.store.args(None)  # refused once closed
        (home,) = self.store.homes.find([job_id])
        args = self.store.args(now, home if self.store.cluster else None)
        args.append(job_id)
        with translate_errors("cancel"):
            res = self.store.call(self._cancel, args)
        if res is None:
            raise NotFound(f"no job with id {job_id!r}")
        if res[1]:
            self.flows().advance_ends([res[1].decode()], now)
        return STATES[res[0]]

    def read_jobs(self, ids: Sequence[str], homes: Sequence[str] | None = None) -> list[JobRecord]:
        """The records of the jobs of ``ids`` that exist, in order (one ``MULTI`` read; on a
        cluster one per home, looked up in the job directory unless ``homes`` are given)."""
        where = list(homes) if homes is not None else self.store.homes.find(ids)
        by_home: dict[str, list[int]] = {}
        for k, home in enumerate(where):
            by_home.setdefault(home, []).append(k)
        keys = self.store.keys
        found: dict[int, JobRecord] = {}
        for home, idx in by_home.items():
            with translate_errors("get_job"):
                pipe = self.store.client.pipeline(transaction=True)
                for k in idx:
                    pipe.hgetall(keys.job(ids[k], home))
                    pipe.lrange(keys.attempts(ids[k], home), 0, -1)
                res = pipe.execute()
            for n, k in enumerate(idx):
                h, recs = res[2 * n], res[2 * n + 1]
                if h:
                    # a hash without a readable queue still reads (salvaged, corrupt)
                    queue = h.get(b"q", b"").decode(errors="replace")
                    suffix = self.store.homes.suffix(home, queue)
                    recs = with_last(recs, h.get(b"la"), h.get(b"lw"))
                    found[k] = job_record(ids[k], h, recs, suffix)
        return [found[k] for k in sorted(found)]

    def get_job(self, job_id: str) -> JobRecord | None:
        """``Storage.get_job``."""
        self.store.args(None)  # refused once closed
        found = self.read_jobs([job_id])
        return found[0] if found else None

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """``Storage.list_attempts``: the finished ones, then the running one."""
        self.store.args(None)
        keys = self.store.keys
        (home,) = self.store.homes.find([job_id])
        with translate_errors("list_attempts"):
            pipe = self.store.client.pipeline(transaction=True)
            pipe.hmget(keys.job(job_id, home), ["st", "att", "wid", "sa", "la", "lw"])
            pipe.lrange(keys.attempts(job_id, home), 0, -1)
            (st, att, wid, sa, la, lw), recs = pipe.execute()
        out = [attempt_from_json(raw) for raw in with_last(recs, la, lw)]
        if st == b"running":
            out.append(running_attempt(att, wid, sa))
        return out
