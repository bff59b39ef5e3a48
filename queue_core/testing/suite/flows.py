"""Contract: flow executions (``SupportsFlows``, SPEC §7; design ``flows-storage.md`` §7).

Every test skips naming ``SupportsFlows`` on a storage without the ability. Steps are
ordinary jobs of the ``default`` queue here; times are explicit, nothing sleeps. After
the events that matter, the stored execution is compared with
:func:`queue_core.rules.flows.decide.apply` of the pure decision (:func:`follows`), so every
backend is held to :mod:`queue_core.rules.flows.decide`.
"""

from __future__ import annotations

import pytest

from queue_core.records.errors import ConfigError, NotFound
from queue_core.records.flows import ExecutionReason, ExecutionState, StepState
from queue_core.records.jobs import JobState, Outcome, Reason
from queue_core.rules.flows import decide
from queue_core.rules.flows.spec import ConcurrencySpec, FlowSpec
from queue_core.rules.leases import REAP_MARGIN_MS as MARGIN
from queue_core.rules.paging import MAX_PAGE_VALUE
from queue_core.storage.abilities import SupportsStepInputsBatch, SupportsWorkflows
from queue_core.storage.flows import step_job_id
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    LEASE,
    MIN,
    SEC,
    T0,
    cancel_end,
    complete_end,
    dead_end,
    enqueue_one,
    released_end,
    retry_end,
    run_concurrently,
    timed_out_end,
)
from queue_core.testing.suite._base import ContractBase, job_of, lacks, race_says
from queue_core.testing.suite._flows_base import (
    claim_steps,
    flows_of,
    follows,
    make_execution,
    make_spec,
    states,
    view_of,
)

_S = StepState
_E = ExecutionState
DIAMOND = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}


class FlowStartContract(ContractBase):
    """Starting, reading and releasing steps."""

    def test_start_releases_only_the_roots(self, storage: Storage) -> None:
        flows = flows_of(storage)
        spec = make_spec(DIAMOND, timeout_ms=10 * MIN)
        new = make_execution(spec)
        assert flows.start_execution(new, now=T0) is _E.RUNNING
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.state, record.flow, record.created_at, record.started_at) == (
            _E.RUNNING,
            spec.name,
            T0,
            T0,
        )
        assert (record.deadline_at, record.finished_at, record.input) == (
            T0 + 10 * MIN,
            None,
            new.input,
        )
        assert record.spec() == spec
        assert record.spec_hash == new.spec_hash
        steps = flows.list_steps(new.id)
        assert [(s.step_id, s.idx, s.state, s.job_id) for s in steps] == [
            ("a", 0, _S.QUEUED, step_job_id(new.id, 0)),
            ("b", 1, _S.PENDING, None),
            ("c", 2, _S.PENDING, None),
            ("d", 3, _S.PENDING, None),
        ]
        assert storage.get_job(step_job_id(new.id, 1)) is None
        job = job_of(storage, step_job_id(new.id, 0))
        assert (job.state, job.execution_id, job.step_id) == (JobState.QUEUED, new.id, "a")
        assert flows.get_execution("nope") is None
        assert flows.list_steps("nope") == []

    def test_claimed_step_carries_the_flow_deadline(self, storage: Storage) -> None:
        flows = flows_of(storage)
        new = make_execution(make_spec({"a": []}, timeout_ms=MIN), timeout_ms=10 * MIN)
        flows.start_execution(new, now=T0)
        claimed = claim_steps(storage, T0 + SEC)["a"]
        assert (claimed.execution_id, claimed.step_id) == (new.id, "a")
        assert claimed.flow_deadline_at == T0 + MIN
        assert claimed.deadline == T0 + MIN  # the earlier of the two bounds
        assert states(flows, new.id) == {"a": _S.RUNNING}

    def test_diamond_releases_each_step_once_after_its_dependencies(self, storage: Storage) -> None:
        flows = flows_of(storage)
        new = make_execution(make_spec(DIAMOND))
        flows.start_execution(new, now=T0)
        a = claim_steps(storage, T0 + 1)["a"]
        before = view_of(flows, new.id)
        assert storage.finish([complete_end(a.ref, b'"A"')], now=T0 + 2) == [True]
        follows(
            before, decide.step_ended(before, "a", _S.SUCCEEDED, T0 + 2), view_of(flows, new.id)
        )
        assert states(flows, new.id) == {
            "a": _S.SUCCEEDED,
            "b": _S.QUEUED,
            "c": _S.QUEUED,
            "d": _S.PENDING,
        }
        got = claim_steps(storage, T0 + 3)
        assert sorted(got) == ["b", "c"]
        storage.finish([complete_end(got["b"].ref, b'"B"')], now=T0 + 4)
        assert states(flows, new.id)["d"] is _S.PENDING
        inputs = flows.get_step_inputs(new.id, "b")
        assert (inputs.input, inputs.results) == (new.input, {"a": b'"A"'})
        storage.finish([complete_end(got["c"].ref, b'"C"')], now=T0 + 5)
        assert states(flows, new.id)["d"] is _S.QUEUED
        assert flows.get_step_inputs(new.id, "d").results == {"b": b'"B"', "c": b'"C"'}
        d = claim_steps(storage, T0 + 6)["d"]
        before = view_of(flows, new.id)
        storage.finish([complete_end(d.ref)], now=T0 + 7)
        follows(
            before, decide.step_ended(before, "d", _S.SUCCEEDED, T0 + 7), view_of(flows, new.id)
        )
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.state, record.reason, record.finished_at) == (_E.SUCCEEDED, None, T0 + 7)
        with pytest.raises(NotFound):
            flows.get_step_inputs(new.id, "zz")
        with pytest.raises(NotFound):
            flows.get_step_inputs("nope", "a")

    def test_step_inputs_in_a_batch_equal_each_read_alone(self, storage: Storage) -> None:
        """``get_step_inputs_batch`` answers each (execution, step) as ``get_step_inputs``
        does, in order, across executions and for a step read before; ``None`` where the
        one-by-one read raises ``NotFound``."""
        if not isinstance(storage, SupportsStepInputsBatch):
            pytest.skip(lacks(SupportsStepInputsBatch))
        flows = flows_of(storage)
        one, two = make_execution(make_spec(DIAMOND)), make_execution(make_spec(DIAMOND))
        for new in (one, two):
            flows.start_execution(new, now=T0)
        roots = storage.claim("w", ["default"], 10, LEASE, now=T0 + 1)
        ends = [complete_end(c.ref, b'"A%d"' % (c.execution_id == two.id)) for c in roots]
        assert len(roots) == 2 and storage.finish(ends, now=T0 + 2) == [True, True]
        flows.get_step_inputs(one.id, "b")  # one read before, the other not
        asked = [(one.id, "b"), (two.id, "c"), (one.id, "a"), ("nope", "a"), (one.id, "zz"),
                 (two.id, "b"), (one.id, "d")]  # fmt: skip
        got = storage.get_step_inputs_batch(asked)
        assert got[3] is None and got[4] is None
        for (eid, sid), inputs in zip(asked, got, strict=True):
            if inputs is not None:
                alone = flows.get_step_inputs(eid, sid)
                assert (inputs.input, inputs.results) == (alone.input, alone.results), sid
        assert got[0] is not None and got[0].results == {"a": b'"A0"'}
        assert got[1] is not None and got[1].results == {"a": b'"A1"'}
        assert got[2] is not None and got[2].results == {} and got[2].input == one.input
        assert storage.get_step_inputs_batch([]) == []

    def test_join_is_released_exactly_once_when_siblings_finish_at_once(
        self, storage: Storage
    ) -> None:
        flows = flows_of(storage)
        n = self.race_threads
        graph: dict[str, list[str]] = {f"s{i}": [] for i in range(n)}
        graph["join"] = list(graph)
        new = make_execution(make_spec(graph))
        flows.start_execution(new, now=T0)
        claimed = claim_steps(storage, T0 + 1, limit=n)
        assert len(claimed) == n
        refs = [c.ref for c in claimed.values()]
        results = run_concurrently(n, lambda i: storage.finish([complete_end(refs[i])], now=T0 + 2))
        assert results == [[True]] * n, f"every sibling's finish takes; got {results!r}"
        assert states(flows, new.id)["join"] is _S.QUEUED
        join = claim_steps(storage, T0 + 3)
        assert list(join) == ["join"], (
            f"{n} siblings finished at once: the join is released once they all succeeded; "
            f"claimable: {list(join)}"
        )
        again = claim_steps(storage, T0 + 3)
        assert again == {}, race_says(f"finish of the {n} dependencies of one join", n, again)

    def test_wide_fan_out_and_fan_in_release_each_step_once(self, storage: Storage) -> None:
        flows = flows_of(storage)
        width = 500
        graph: dict[str, list[str]] = {"root": []}
        graph.update({f"s{i}": ["root"] for i in range(width)})
        graph["join"] = [f"s{i}" for i in range(width)]
        new = make_execution(make_spec(graph))
        flows.start_execution(new, now=T0)
        root = claim_steps(storage, T0 + 1)["root"]
        storage.finish([complete_end(root.ref)], now=T0 + 2)
        claimed = storage.claim("w", ["default"], 2 * width, LEASE, now=T0 + 3)
        assert sorted(c.step_id or "" for c in claimed) == sorted(f"s{i}" for i in range(width))
        ends = [complete_end(c.ref) for c in claimed]
        assert storage.finish(ends[:-1], now=T0 + 4) == [True] * (width - 1)
        assert states(flows, new.id)["join"] is _S.PENDING
        storage.finish(ends[-1:], now=T0 + 5)
        assert states(flows, new.id)["join"] is _S.QUEUED
        assert list(claim_steps(storage, T0 + 6, limit=5)) == ["join"]

    def test_max_parallel_is_never_exceeded(self, storage: Storage) -> None:
        flows = flows_of(storage)
        new = make_execution(make_spec({f"s{i}": [] for i in range(6)}, max_parallel=2))
        flows.start_execution(new, now=T0)
        assert list(states(flows, new.id).values()).count(_S.QUEUED) == 2
        n = max(self.race_threads, 2)
        results = run_concurrently(
            n, lambda i: storage.claim(f"w{i}", ["default"], 3, LEASE, now=T0 + 1)
        )
        claimed = [c for r in results if isinstance(r, list) for c in r]
        assert len(claimed) == 2, (
            f"max_parallel=2: {n} concurrent claims may run only the 2 released steps; "
            f"got {[c.step_id for c in claimed]}"
        )
        storage.finish([complete_end(claimed[0].ref)], now=T0 + 2)
        after = states(flows, new.id)
        assert list(after.values()).count(_S.QUEUED) == 1
        assert list(after.values()).count(_S.RUNNING) == 1
        assert list(after.values()).count(_S.PENDING) == 3
        assert [s.step_id for s in flows.list_steps(new.id) if s.state is _S.QUEUED] == ["s2"]

    def test_a_retried_step_keeps_its_place_and_then_releases(self, storage: Storage) -> None:
        flows = flows_of(storage)
        new = make_execution(
            make_spec({"a": [], "b": [], "c": ["a"]}, max_parallel=2), max_attempts=3
        )
        flows.start_execution(new, now=T0)
        a = claim_steps(storage, T0 + 1, limit=1)["a"]
        before = view_of(flows, new.id)
        storage.finish([retry_end(a.ref, 10 * SEC)], now=T0 + 2)
        follows(before, decide.step_ended(before, "a", _S.QUEUED, T0 + 2), view_of(flows, new.id))
        assert states(flows, new.id) == {"a": _S.QUEUED, "b": _S.QUEUED, "c": _S.PENDING}
        assert list(claim_steps(storage, T0 + 3)) == ["b"]  # a is in its backoff
        again = claim_steps(storage, T0 + 12 * SEC)["a"]
        assert again.attempt == 2
        storage.finish([complete_end(again.ref)], now=T0 + 13 * SEC)
        assert states(flows, new.id)["c"] is _S.QUEUED


class FlowEndContract(ContractBase):
    """Failure, deadline, cancel and fencing."""

    def test_dead_step_fails_the_execution_after_running_siblings(self, storage: Storage) -> None:
        flows = flows_of(storage)
        new = make_execution(make_spec({"a": [], "b": [], "c": ["a", "b"]}))
        flows.start_execution(new, now=T0)
        got = claim_steps(storage, T0 + 1)
        before = view_of(flows, new.id)
        storage.finish([dead_end(got["a"].ref, dead_reason="retries_exhausted")], now=T0 + 2)
        follows(before, decide.step_ended(before, "a", _S.DEAD, T0 + 2), view_of(flows, new.id))
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.state, record.failed_step) == (_E.RUNNING, "a")
        assert states(flows, new.id) == {"a": _S.DEAD, "b": _S.RUNNING, "c": _S.NOT_RUN}
        steps = {s.step_id: s for s in flows.list_steps(new.id)}
        assert steps["a"].reason == "retries_exhausted"
        assert steps["c"].reason == ExecutionReason.STEP_FAILED.value
        storage.finish([complete_end(got["b"].ref)], now=T0 + 3)
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.state, record.reason, record.failed_step, record.finished_at) == (
            _E.FAILED,
            ExecutionReason.STEP_FAILED,
            "a",
            T0 + 3,
        )

    def test_dead_step_ends_a_sibling_in_backoff_not_run(self, storage: Storage) -> None:
        flows = flows_of(storage)
        new = make_execution(make_spec({"a": [], "b": []}), max_attempts=3)
        flows.start_execution(new, now=T0)
        got = claim_steps(storage, T0 + 1)
        storage.finish([retry_end(got["b"].ref, MIN)], now=T0 + 2)
        storage.finish([dead_end(got["a"].ref)], now=T0 + 3)
        assert states(flows, new.id) == {"a": _S.DEAD, "b": _S.NOT_RUN}
        job = job_of(storage, step_job_id(new.id, 1))
        assert (job.state, job.reason) == (JobState.CANCELLED, Reason.NOT_RUN.value)
        assert claim_steps(storage, T0 + 2 * MIN) == {}
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.state, record.reason) == (_E.FAILED, ExecutionReason.STEP_FAILED)

    def test_deadline_is_enforced_by_reap_with_no_worker(self, storage: Storage) -> None:
        flows = flows_of(storage)
        new = make_execution(
            make_spec({"a": [], "b": [], "c": ["a"]}, timeout_ms=MIN), max_attempts=3
        )
        flows.start_execution(new, now=T0)
        got = claim_steps(storage, T0 + 1, limit=1)
        a = got["a"]
        storage.renew([a.ref], 10 * MIN, now=T0 + 2)
        assert storage.reap(now=T0 + MIN - 1) == []
        # a margin after the deadline is left to the worker running the step (never early)
        assert storage.reap(now=T0 + MIN + MARGIN - 1) == []
        assert flows.get_execution(new.id).state is _E.RUNNING  # type: ignore[union-attr]
        before = view_of(flows, new.id)
        reaped = storage.reap(now=T0 + MIN + MARGIN)
        follows(before, decide.advance(before, T0 + MIN + MARGIN), view_of(flows, new.id))
        assert [(r.job_id, r.outcome, r.reason, r.state) for r in reaped] == [
            (a.id, Outcome.TIMED_OUT, Reason.FLOW_TIMEOUT.value, JobState.TIMED_OUT)
        ]
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.state, record.reason, record.finished_at) == (
            _E.TIMED_OUT,
            ExecutionReason.FLOW_TIMEOUT,
            T0 + MIN + MARGIN,
        )
        assert states(flows, new.id) == {"a": _S.TIMED_OUT, "b": _S.NOT_RUN, "c": _S.NOT_RUN}
        job = job_of(storage, a.id)
        assert (job.state, job.reason, job.attempts) == (
            JobState.TIMED_OUT,
            Reason.FLOW_TIMEOUT.value,
            1,
        )
        attempt = storage.list_attempts(a.id)[-1]
        assert (attempt.outcome, attempt.reason) == (Outcome.TIMED_OUT, "flow_timeout")
        assert job_of(storage, step_job_id(new.id, 1)).state is JobState.CANCELLED
        # fencing: the worker's late renew and finish are refused
        assert storage.renew([a.ref], LEASE, now=T0 + MIN + MARGIN + 1).lost == [a.ref]
        assert storage.finish([complete_end(a.ref)], now=T0 + MIN + MARGIN + 2) == [False]
        assert storage.reap(now=T0 + 20 * MIN) == []
        assert claim_steps(storage, T0 + 20 * MIN) == {}
        assert job_of(storage, a.id).attempts == 1

    def test_no_step_is_claimed_at_or_after_its_flow_s_deadline(self, storage: Storage) -> None:
        """SPEC §7: at the deadline storage refuses new steps -- a step queued then (a
        retry whose backoff ends later, a root no worker took in time) is left for the
        reaper, which ends it ``not_run`` without an attempt; other jobs are claimed."""
        flows = flows_of(storage)
        new = make_execution(make_spec({"a": [], "b": ["a"]}, timeout_ms=MIN), max_attempts=3)
        flows.start_execution(new, now=T0)
        plain = enqueue_one(storage, now=T0 + 1)
        got = storage.claim("w", ["default"], 10, LEASE, now=T0 + MIN)
        assert [c.id for c in got] == [plain]  # not step a: its flow's deadline passed
        assert storage.reap(now=T0 + MIN + MARGIN) == []  # nothing ran: nothing reaped
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.state, record.reason) == (_E.TIMED_OUT, ExecutionReason.FLOW_TIMEOUT)
        assert states(flows, new.id) == {"a": _S.NOT_RUN, "b": _S.NOT_RUN}
        a = job_of(storage, step_job_id(new.id, 0))
        assert (a.state, a.attempts) == (JobState.CANCELLED, 0)
        assert storage.list_attempts(a.id) == []
        assert claim_steps(storage, T0 + 2 * MIN) == {}

    def test_deadline_seen_by_the_worker_ends_the_step_timed_out(self, storage: Storage) -> None:
        flows = flows_of(storage)
        new = make_execution(make_spec({"a": [], "b": ["a"]}, timeout_ms=MIN), max_attempts=3)
        flows.start_execution(new, now=T0)
        a = claim_steps(storage, T0 + 1)["a"]
        end = timed_out_end(a.ref, job_reason=None, reason=Reason.FLOW_TIMEOUT.value)
        before = view_of(flows, new.id)
        assert storage.finish([end], now=T0 + MIN - 5) == [True]
        follows(
            before,
            decide.step_ended(before, "a", _S.TIMED_OUT, T0 + MIN - 5),
            view_of(flows, new.id),
        )
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.state, record.reason) == (_E.TIMED_OUT, ExecutionReason.FLOW_TIMEOUT)
        assert states(flows, new.id) == {"a": _S.TIMED_OUT, "b": _S.NOT_RUN}
        assert job_of(storage, a.id).state is JobState.TIMED_OUT
        assert claim_steps(storage, T0 + 2 * MIN) == {}

    def test_cancel_stops_running_steps_then_ends_cancelled(self, storage: Storage) -> None:
        flows = flows_of(storage)
        new = make_execution(make_spec({"a": [], "b": ["a"]}))
        flows.start_execution(new, now=T0)
        a = claim_steps(storage, T0 + 1)["a"]
        before = view_of(flows, new.id)
        assert flows.cancel_execution(new.id, now=T0 + 2) is _E.CANCELLING
        follows(before, decide.cancel(before, T0 + 2), view_of(flows, new.id))
        assert storage.renew([a.ref], LEASE, now=T0 + 3).cancel_requested == [a.ref]
        assert states(flows, new.id) == {"a": _S.RUNNING, "b": _S.NOT_RUN}
        storage.finish([cancel_end(a.ref)], now=T0 + 4)
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.state, record.reason, record.finished_at) == (
            _E.CANCELLED,
            ExecutionReason.CANCELLED,
            T0 + 4,
        )
        assert states(flows, new.id) == {"a": _S.CANCELLED, "b": _S.NOT_RUN}
        assert flows.cancel_execution(new.id, now=T0 + 5) is _E.CANCELLED
        with pytest.raises(NotFound):
            flows.cancel_execution("nope", now=T0)

    def test_cancel_with_nothing_running_ends_at_once(self, storage: Storage) -> None:
        flows = flows_of(storage)
        new = make_execution(make_spec({"a": []}))
        flows.start_execution(new, now=T0)
        assert flows.cancel_execution(new.id, now=T0 + 1) is _E.CANCELLED
        job = job_of(storage, step_job_id(new.id, 0))
        assert (job.state, job.reason) == (JobState.CANCELLED, Reason.NOT_RUN.value)
        assert claim_steps(storage, T0 + 2) == {}

    def test_lost_attempt_of_a_step_is_retried_then_fails_the_execution(
        self, storage: Storage
    ) -> None:
        flows = flows_of(storage)
        new = make_execution(make_spec({"a": [], "b": ["a"]}), max_attempts=2)
        flows.start_execution(new, now=T0)
        claim_steps(storage, T0)
        storage.reap(now=T0 + LEASE)
        assert states(flows, new.id) == {"a": _S.QUEUED, "b": _S.PENDING}
        claim_steps(storage, T0 + LEASE + 1)
        reaped = storage.reap(now=T0 + 2 * LEASE + 1)
        assert [r.state for r in reaped] == [JobState.DEAD]
        assert states(flows, new.id) == {"a": _S.DEAD, "b": _S.NOT_RUN}
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.state, record.failed_step) == (_E.FAILED, "a")

    def test_a_released_step_runs_again_and_its_execution_goes_on(self, storage: Storage) -> None:
        # a step released at worker shutdown on its last attempt: queued at once with one
        # more attempt, the execution still running; its dependents start after it
        flows = flows_of(storage)
        new = make_execution(make_spec({"a": [], "b": ["a"]}), max_attempts=1)
        flows.start_execution(new, now=T0)
        a = claim_steps(storage, T0 + 1)["a"]
        before = view_of(flows, new.id)
        assert storage.finish([released_end(a.ref)], now=T0 + 2) == [True]
        follows(before, decide.step_ended(before, "a", _S.QUEUED, T0 + 2), view_of(flows, new.id))
        assert states(flows, new.id) == {"a": _S.QUEUED, "b": _S.PENDING}
        again = claim_steps(storage, T0 + 3)["a"]
        assert (again.attempt, again.max_attempts) == (2, 2)
        storage.finish([complete_end(again.ref)], now=T0 + 4)
        assert states(flows, new.id)["b"] is _S.QUEUED
        record = flows.get_execution(new.id)
        assert record is not None and record.state is _E.RUNNING

    def test_cancelling_a_step_job_fails_its_execution(self, storage: Storage) -> None:
        flows = flows_of(storage)
        new = make_execution(make_spec({"a": [], "b": ["a"]}))
        flows.start_execution(new, now=T0)
        assert storage.cancel(step_job_id(new.id, 0), now=T0 + 1) is JobState.CANCELLED
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.state, record.reason, record.failed_step) == (
            _E.FAILED,
            ExecutionReason.STEP_FAILED,
            "a",
        )

    def test_a_step_dead_letter_cannot_be_replayed_alone(self, storage: Storage) -> None:
        """Without ``SupportsWorkflows`` it is refused; with it the execution resumes
        (``ResumeContract.test_retry_dead_of_a_step_resumes_its_execution``)."""
        flows = flows_of(storage)
        new = make_execution(make_spec({"a": []}))
        flows.start_execution(new, now=T0)
        a = claim_steps(storage, T0 + 1)["a"]
        storage.finish([dead_end(a.ref)], now=T0 + 2)
        dead_id = job_of(storage, a.id).dead_id
        assert dead_id is not None
        if isinstance(storage, SupportsWorkflows):
            assert storage.retry_dead(dead_id, now=T0 + 3) == a.id  # the step runs again
            assert storage.get_dead(dead_id) is None
            assert job_of(storage, a.id).state is JobState.QUEUED
            return
        with pytest.raises(ConfigError) as refused:
            storage.retry_dead(dead_id, now=T0 + 3)
        assert refused.value.code == "invalid_option"
        assert storage.get_dead(dead_id) is not None


class FlowConcurrencyContract(ContractBase):
    """Execution concurrency, listing and prune."""

    def _spec(self, limit: int, behavior: str, name: str = "conc") -> FlowSpec:
        return make_spec({"a": []}, name=name, concurrency=ConcurrencySpec(limit, behavior))  # type: ignore[arg-type]

    def test_queue_behaviour_starts_the_oldest_when_a_slot_frees(self, storage: Storage) -> None:
        flows = flows_of(storage)
        spec = self._spec(1, "queue")
        first, second, third = (make_execution(spec) for _ in range(3))
        assert flows.start_execution(first, now=T0) is _E.RUNNING
        assert flows.start_execution(second, now=T0 + 1) is _E.QUEUED
        assert flows.start_execution(third, now=T0 + 2) is _E.QUEUED
        assert states(flows, second.id) == {"a": _S.PENDING}
        queued = flows.get_execution(second.id)
        assert queued is not None and queued.started_at is None
        a = claim_steps(storage, T0 + 3)["a"]
        assert flows.cancel_execution(first.id, now=T0 + 4) is _E.CANCELLING
        assert flows.get_execution(second.id).state is _E.QUEUED  # type: ignore[union-attr]
        storage.finish([cancel_end(a.ref)], now=T0 + 5)
        started = flows.get_execution(second.id)
        assert started is not None
        assert (started.state, started.started_at) == (_E.RUNNING, T0 + 5)
        assert flows.get_execution(third.id).state is _E.QUEUED  # type: ignore[union-attr]
        assert list(claim_steps(storage, T0 + 6)) == ["a"]

    def test_skip_behaviour_skips_and_lists_the_extra_execution(self, storage: Storage) -> None:
        flows = flows_of(storage)
        spec = self._spec(1, "skip")
        first, second = make_execution(spec), make_execution(spec)
        assert flows.start_execution(first, now=T0) is _E.RUNNING
        assert flows.start_execution(second, now=T0 + 1) is _E.SKIPPED
        record = flows.get_execution(second.id)
        assert record is not None
        assert (record.state, record.reason) == (_E.SKIPPED, ExecutionReason.CONCURRENCY_LIMIT)
        skipped = flows.list_executions(state=_E.SKIPPED)
        assert [e.id for e in skipped] == [second.id]
        assert storage.get_job(step_job_id(second.id, 0)) is None

    def test_concurrent_skip_starts_admit_exactly_one(self, storage: Storage) -> None:
        flows = flows_of(storage)
        spec = self._spec(1, "skip")
        news = [make_execution(spec) for _ in range(self.race_threads)]
        results = run_concurrently(len(news), lambda i: flows.start_execution(news[i], now=T0))
        assert sorted(str(r) for r in results) == ["running"] + ["skipped"] * (len(news) - 1), (
            race_says(
                "start_execution of a flow with concurrency limit 1, skip", len(news), results
            )
        )

    def test_other_flows_and_other_keys_never_count(self, storage: Storage) -> None:
        flows = flows_of(storage)
        mine, other = self._spec(1, "skip"), self._spec(1, "skip", name="other")
        assert flows.start_execution(make_execution(mine), now=T0) is _E.RUNNING
        assert flows.start_execution(make_execution(other), now=T0) is _E.RUNNING
        keyed = [make_execution(mine, conc_key=f"conc:{k}") for k in ("x", "y", "x")]
        assert [flows.start_execution(n, now=T0 + 1) for n in keyed] == [
            _E.RUNNING,
            _E.RUNNING,
            _E.SKIPPED,
        ]

    def test_list_executions_newest_first_with_filters_and_pages(self, storage: Storage) -> None:
        flows = flows_of(storage)
        one, two = make_spec({"a": []}, name="one"), make_spec({"a": []}, name="two")
        made = [make_execution(s) for s in (one, two, one)]
        for i, n in enumerate(made):
            flows.start_execution(n, now=T0 + i)
        a = claim_steps(storage, T0 + 5, limit=1)
        storage.finish([complete_end(c.ref) for c in a.values()], now=T0 + 6)
        assert [e.id for e in flows.list_executions()] == [m.id for m in reversed(made)]
        assert [e.id for e in flows.list_executions(flow="one")] == [made[2].id, made[0].id]
        assert [e.id for e in flows.list_executions(state=_E.SUCCEEDED)] == [made[0].id]
        assert [e.id for e in flows.list_executions(limit=1, offset=1)] == [made[1].id]
        assert flows.list_executions(offset=3) == []
        info = flows.list_executions(state=_E.SUCCEEDED)[0].info()
        assert (info.flow, info.state, info.finished_at is not None) == ("one", _E.SUCCEEDED, True)

    def test_list_executions_refuses_a_page_out_of_range(self, storage: Storage) -> None:
        flows = flows_of(storage)
        made = make_execution(make_spec({"a": []}))
        flows.start_execution(made, now=T0)
        for limit, offset, field in [(1, 2**63, "offset"), (2**64, 0, "limit"), (-1, 0, "limit")]:
            for state in (None, _E.RUNNING):
                with pytest.raises(ConfigError) as info:
                    flows.list_executions(state=state, limit=limit, offset=offset)
                assert (info.value.code, info.value.field) == ("invalid_option", field)
        assert [e.id for e in flows.list_executions(limit=MAX_PAGE_VALUE)] == [made.id]
        assert flows.list_executions(offset=MAX_PAGE_VALUE) == []

    def test_prune_removes_finished_executions_after_retention_only(self, storage: Storage) -> None:
        flows = flows_of(storage)
        done, running = make_execution(make_spec({"a": []})), make_execution(make_spec({"a": []}))
        flows.start_execution(done, now=T0)
        a = claim_steps(storage, T0 + 1)["a"]
        storage.finish([complete_end(a.ref)], now=T0 + 2)
        flows.start_execution(running, now=T0 + 3)
        storage.prune(now=T0 + 2 + self.retention_ms - 1)
        assert flows.get_execution(done.id) is not None
        storage.prune(now=T0 + 2 + self.retention_ms)
        assert flows.get_execution(done.id) is None
        assert flows.list_steps(done.id) == []
        assert storage.get_job(a.id) is None
        assert flows.get_execution(running.id) is not None
        assert [e.id for e in flows.list_executions()] == [running.id]


class FlowContract(FlowStartContract, FlowEndContract, FlowConcurrencyContract):
    """Every flow contract test (skipped, naming ``SupportsFlows``, without the ability)."""
