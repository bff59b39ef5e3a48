"""Durable workflows on Redis (``SupportsWorkflows``, SPEC §12): Python reads, the core
decides (:mod:`queue_core.rules.flows.workflow`, :mod:`~queue_core.rules.flows.plan`), the
flows part's one interpreter applies (``lua/_flow.lua`` through ``flow_apply.lua``).

Every change goes through :meth:`RedisFlows.update <backends.redis.flows.RedisFlows.update>`:
the execution is read with its memos and event waits, its pending step events folded, the
core's operations added, and the plan written only if the execution's version did not move
(else read again). What must hold at the write is the script's guard: a fenced attempt
(``put_memo``, ``start_child_execution``, a suspension), no event stored since the read (a
suspension's wait), and a suspended attempt's end applied in the same script as its plan.
Keys: the table of ``docs/backends/redis.md`` (all in the shared home ``{prefix}``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from backends.redis.errors import translate_errors
from backends.redis.flow_encode import Blobs, encode_ops
from backends.redis.flows import More, RedisFlows, Row
from backends.redis.jobs import RedisJobs
from backends.redis.store import RedisStore
from queue_core.records.errors import ConfigError, LeaseLost, NotFound, StorageError
from queue_core.records.flows import ExecutionState
from queue_core.records.jobs import LeaseRef
from queue_core.records.workflows import (
    FUNCTION_STEP,
    EventWait,
    MemoRecord,
    StoredEvent,
    SuspendedEnd,
)
from queue_core.rules.flows import decide, plan, workflow
from queue_core.rules.flows.decide import ExecutionView
from queue_core.rules.flows.decide_fast import ExecutionHead, StepIndex
from queue_core.storage.flows import NewExecution
from queue_core.storage.workflows import WorkflowState, sub_execution_id

__all__ = ["RedisWorkflows"]

log = logging.getLogger("backends.redis")

_TRIES = 200
"""Retries of ``send_event`` when the waits it read changed before its script ran."""


def _memos(more: More) -> dict[str, MemoRecord]:
    out = {}
    for k, value in more["xm"].items():
        seq, at = more["xmi"][k].split(b"|")
        key = k.decode()
        out[key] = MemoRecord(key=key, value=value, seq=int(seq), at=int(at))
    return out


def _fence(ref: LeaseRef, **more: object) -> str:
    return json.dumps({"f": [ref.job_id, str(ref.attempt), ref.lease_token], **more})


def _head(view: ExecutionView) -> ExecutionHead:
    return ExecutionHead(
        state=view.state,
        max_parallel=view.max_parallel,
        deadline_at=view.deadline_at,
        reason=view.reason,
        failed_step=view.failed_step,
        kind=view.kind,
    )


class RedisWorkflows:
    """The workflow operations of one store, and the suspension and claim hooks of the
    jobs parts (see the module doc)."""

    def __init__(self, store: RedisStore, flows: Callable[[], RedisFlows], jobs: RedisJobs) -> None:
        self.store = store
        self._flows = flows
        self.jobs = jobs
        self._send = store.script("flow_send")

    @property
    def flows(self) -> RedisFlows:
        """The flows part (built on first use: a lazy part may not build another)."""
        return self._flows()

    # ------------------------------------------------------------------ SupportsWorkflows

    def workflow_state(self, execution_id: str) -> WorkflowState | None:
        """``SupportsWorkflows.workflow_state``."""
        rec = self.flows.get_execution(execution_id)
        if rec is None:
            return None
        steps = self.flows.list_steps(execution_id)
        key = self.store.key
        with translate_errors("workflow_state"):
            pipe = self.store.client.pipeline(transaction=True)
            pipe.hgetall(key("xm", execution_id))
            pipe.hgetall(key("xmi", execution_id))
            xm, xmi = pipe.execute()
        ids = [s.job_id for s in steps if s.job_id is not None]
        found = {j.id: j for j in self.jobs.read_jobs(ids)}
        jobs = {s.idx: found[s.job_id] for s in steps if s.job_id in found}
        memos = _memos({"xm": xm, "xmi": xmi})
        return WorkflowState(execution=rec, steps=steps, memos=memos, jobs=jobs)

    def put_memo(
        self, ref: LeaseRef, execution_id: str, key: str, value: bytes, now: int | None
    ) -> None:
        """``SupportsWorkflows.put_memo``: fenced by ``ref`` in the script."""
        t = self.store.now(now)
        got = self.flows.update(
            execution_id, t, lambda *_: [plan.PutMemo(key, value)], lambda _: _fence(ref)
        )
        if got is None:
            raise LeaseLost(f"job {ref.job_id}: execution {execution_id} is gone")

    def send_event(self, name: str, key: str | None, data: bytes, now: int | None) -> int:
        """``SupportsWorkflows.send_event``: the waits of ``name`` read, each delivery
        planned (``workflow.delivers``, ``deliver_ops``), then the event stored and the
        plans applied in one script (``flow_send.lua``), if the waits did not change."""
        t = self.store.now(now)
        wn = self.store.key("wn", name)
        for _ in range(_TRIES):
            with translate_errors("send_event"):
                raw: dict[bytes, bytes] = self.store.client.hgetall(wn)
            plans: dict[str, list[plan.Op]] = {}
            woken = 0
            for field, wait in raw.items():
                memo_key, _, wkey, since, until = json.loads(wait)
                w = EventWait(memo_key=memo_key, name=name, key=wkey, since=since, until=until)
                if workflow.delivers(w, key, t):
                    eid = field.decode().split("\n", 1)[0]
                    plans.setdefault(eid, []).extend(workflow.deliver_ops(w, data))
                    woken += 1
            blobs: Blobs = []
            head = {
                "w": [x.decode() for kv in raw.items() for x in kv],
                "x": [[eid, encode_ops(ops, blobs)] for eid, ops in plans.items()],
            }
            args = self.store.args(t)
            args += (name, "" if key is None else "k" + key, data, json.dumps(head), *blobs)
            with translate_errors("send_event"):
                if self.store.run(self._send, args):
                    return woken
        raise StorageError(f"send_event {name!r}: too much contention")

    def start_child_execution(
        self, ref: LeaseRef, new: NewExecution, step_id: str, memo_key: str, now: int | None
    ) -> ExecutionState:
        """``SupportsWorkflows.start_child_execution``."""
        t = self.store.now(now)
        parent, idx = new.parent_id, new.parent_idx
        if parent is None or idx is None:
            raise StorageError(f"execution {new.id} has no parent link")
        self._check_fence(ref, parent)
        steps = self.flows.list_steps(parent)
        if idx != len(steps) or new.id != sub_execution_id(parent, idx):
            raise StorageError(
                f"sub-execution {new.id}: step index {idx} is not the next one of "
                f"execution {parent} ({len(steps)})"
            )
        state = self.flows.start_execution(new, t)
        ops = workflow.child_flow_ops(idx, step_id, memo_key, state)
        self.flows.update(parent, t, lambda *_: ops, lambda _: _fence(ref))
        return state

    def _check_fence(self, ref: LeaseRef, execution_id: str) -> None:
        with translate_errors("start_child_execution"):
            st, att, tok, x = self.store.client.hmget(
                self.store.keys.job(ref.job_id), ["st", "att", "tok", "x"]
            )
        if (st, att, tok, x) != (
            b"running",
            str(ref.attempt).encode(),
            ref.lease_token.encode(),
            execution_id.encode(),
        ):
            raise LeaseLost(
                f"attempt {ref.attempt} of job {ref.job_id} is not a current attempt of "
                f"execution {execution_id}"
            )

    def resume_execution(
        self, execution_id: str, from_step: str | None, now: int | None
    ) -> ExecutionState:
        """``SupportsWorkflows.resume_execution`` (and ``retry_dead`` of a step's entry)."""
        t = self.store.now(now)

        def resume(view: ExecutionView, index: StepIndex, f: Row, more: More) -> list[plan.Op]:
            memos = _memos(more)
            workflow.check_resume(execution_id, view, from_step, memos)
            others = [s for s in more.get("slots", []) if s.id != execution_id]
            admission = decide.admit(more.get("spec"), others)
            return workflow.resume_ops(view, index, admission, t, from_step=from_step, memos=memos)

        got = self.flows.update(execution_id, t, resume, with_key=True)
        if got is None:
            raise NotFound(f"no flow execution with id {execution_id!r}")
        return got

    # ------------------------------------------------------------------ the jobs parts' hooks

    def suspend(self, end: SuspendedEnd, now: int | None) -> bool:
        """``finish`` of a function step's attempt that ended suspended: the attempt's end
        (a retry that spends no attempt) and ``workflow.suspend_ops`` in one script,
        with the first stored event its wait receives; ``False`` when not current."""
        t = self.store.now(now)
        ref, d, err = end.ref, end.decision, end.error
        with translate_errors("finish"):
            x = self.store.client.hget(self.store.keys.job(ref.job_id), "x")
        if x is None:
            return False
        info = [end.outcome.value, end.reason, None, None, None, None, end.mode]
        if err is not None:
            info[2:6] = [err.error_class, err.error_type, err.message, err.traceback]
        lost = "" if d.lost_delay_ms is None else str(d.lost_delay_ms)
        guard: dict[str, object] = {"s": [json.dumps(info), str(d.delay_ms), lost]}
        wait = end.suspension.wait
        # on a cluster the children live in the shared home, as an execution's step jobs:
        # a worker of a child's queue claims there once the queue is marked (homes.py)
        homes = self.store.homes
        homes.prepare((homes.shared, c.job.queue) for c in end.suspension.children)

        def build(view: ExecutionView, index: StepIndex, f: Row, more: More) -> list[plan.Op]:
            event = None
            if wait is not None:
                n, events = self._events(wait.name, wait.since, t)
                guard["n"] = n
                event = workflow.first_delivery(wait, events, t)
            return workflow.suspend_ops(view, index, end.suspension, t, event)

        try:
            got = self.flows.update(x.decode(), t, build, lambda _: _fence(ref, **guard))
        except LeaseLost:
            return False
        return got is not None

    def _events(self, name: str, since: int, now: int) -> tuple[str, list[StoredEvent]]:
        """The event counter and the stored events of ``name`` sent in ``since..now``,
        earliest first (one ``MULTI`` read)."""
        key = self.store.key
        with translate_errors("read events"):
            pipe = self.store.client.pipeline(transaction=True)
            pipe.get(f"{self.store.key_prefix}:evn")
            pipe.zrangebyscore(key("ev", name), since, now, withscores=True)
            n, seqs = pipe.execute()
            pipe = self.store.client.pipeline(transaction=True)
            pipe.hmget(key("evd", name), [s for s, _ in seqs] or ["-"])
            pipe.hmget(key("evk", name), [s for s, _ in seqs] or ["-"])
            datas, keys = pipe.execute()
        events = [
            StoredEvent(
                name=name,
                key=None if k in (None, b"") else k[1:].decode(),
                data=v or b"",
                at=int(at),
            )
            for (_, at), v, k in zip(seqs, datas, keys, strict=False)
        ]
        return (n or b"0").decode(), events

    def claimed(self, execution_id: str, now: int | None) -> None:
        """A function step's job was claimed: ``plan.claim_ops`` (a ``waiting`` workflow
        is ``running`` again; the step itself was set by ``claim.lua``)."""
        with translate_errors("claim"):
            st = self.store.client.hget(self.store.key("x", execution_id), "st")
        if st != ExecutionState.WAITING.value.encode():
            return
        t = self.store.now(now)

        def build(view: ExecutionView, index: StepIndex, f: Row, more: More) -> list[plan.Op]:
            ops = plan.claim_ops(index, FUNCTION_STEP, _head(view))
            return [op for op in ops if isinstance(op, plan.SetExecution)]

        try:
            self.flows.update(execution_id, t, build)
        except StorageError as exc:  # the claim stands: the next suspension or end judges it
            log.warning("workflow %s: its function's claim left it waiting: %s", execution_id, exc)

    def retry_dead_step(self, dead_id: str, now: int | None) -> str:
        """``retry_dead`` of a flow step's entry: its execution resumes (refused as
        ``resume_execution`` refuses it, the entry kept); the step's job id."""
        with translate_errors("retry_dead"):
            jid, x = self.store.client.hmget(self.store.keys.dead(dead_id), ["jid", "x"])
        if jid is None or x is None:
            raise NotFound(f"no dead-letter entry with id {dead_id!r}")
        eid = x.decode()
        if self.flows.get_execution(eid) is None:
            raise ConfigError(
                f"dead-letter entry {dead_id!r} is a step of execution {eid}, which is gone",
                code="invalid_option",
                field="dead_id",
                value=dead_id,
            )
        self.resume_execution(eid, None, now)
        dk = self.store.keys.dead(dead_id)
        with translate_errors("retry_dead"):  # the job's re-run removed its current entry
            tn = self.store.client.hget(dk, "tn")
            pipe = self.store.client.pipeline(transaction=True)
            pipe.delete(dk)
            pipe.zrem(f"{self.store.key_prefix}:dz", dead_id)
            if tn is not None:
                pipe.zrem(self.store.key("dt", tn.decode()), dead_id)
            pipe.execute()
        return str(jid.decode())
