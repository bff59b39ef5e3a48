"""Contract: debounce (``SupportsDebounce``), pauses (``SupportsPause``) and progress
(``SupportsProgress``), SPEC §13. Each test skips, naming the ability, on a storage
without it."""

from __future__ import annotations

from typing import Any

import pytest

from queue_core.records.control import PauseKind, ProgressUpdate
from queue_core.records.errors import ConfigError
from queue_core.records.jobs import ClaimedJob, Enqueued, JobState, NewJob, dt_from_ms
from queue_core.rules.control import debounce_ready_at
from queue_core.storage.abilities import SupportsDebounce, SupportsPause, SupportsProgress
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    LEASE,
    MIN,
    SEC,
    T0,
    claim_one,
    complete_end,
    enqueue_one,
    new_id,
    new_job,
    run_concurrently,
)
from queue_core.testing.suite._base import ContractBase, job_of, lacks

__all__ = ["DebounceContract", "PauseContract", "ProgressContract"]


def _deb(storage: Storage) -> SupportsDebounce:
    if not isinstance(storage, SupportsDebounce):
        pytest.skip(lacks(SupportsDebounce))
    return storage


def _pause(storage: Storage) -> SupportsPause:
    if not isinstance(storage, SupportsPause):
        pytest.skip(lacks(SupportsPause))
    return storage


def _progress(storage: Storage) -> SupportsProgress:
    if not isinstance(storage, SupportsProgress):
        pytest.skip(lacks(SupportsProgress))
    return storage


def _payload(n: int) -> bytes:
    return b'{"args":[%d],"kwargs":{}}' % n


class DebounceContract(ContractBase):
    """Calls with one debounce key merge into the queued job: last call wins."""

    @pytest.fixture(autouse=True)
    def _fresh_debounce_key(self) -> None:
        self.deb_key = f"tests.deb:{new_id()}"

    def _deb_call(self, n: int, key: str | None = None, **fields: Any) -> NewJob:
        fields.setdefault("delay_ms", 10 * SEC)
        return new_job(
            payload=_payload(n),
            debounce_key=key or self.deb_key,
            debounce_ms=10 * SEC,
            debounce_max_ms=100 * SEC,
            **fields,
        )

    def _deb_one(self, storage: Storage, job: NewJob, now: int) -> Enqueued:
        (got,) = _deb(storage).enqueue_debounced([job], now=now)
        return got

    def test_a_call_merges_into_the_queued_job_last_arguments_win(self, storage: Storage) -> None:
        first = self._deb_call(1)
        assert self._deb_one(storage, first, T0) == Enqueued(first.id, JobState.QUEUED)
        for n, at in ((2, T0 + SEC), (3, T0 + 5 * SEC)):
            later = self._deb_call(n)
            assert self._deb_one(storage, later, at) == Enqueued(first.id, JobState.QUEUED, True)
            assert storage.get_job(later.id) is None
        record = job_of(storage, first.id)
        assert (record.payload, record.run_at) == (_payload(3), T0 + 15 * SEC)
        assert storage.claim("w", ["default"], 5, LEASE, now=T0 + 15 * SEC - 1) == []
        claimed = claim_one(storage, now=T0 + 15 * SEC)
        assert (claimed.id, claimed.payload) == (first.id, _payload(3))

    def test_the_run_time_moves_but_never_past_debounce_max(self, storage: Storage) -> None:
        first = self._deb_call(0)
        self._deb_one(storage, first, T0)
        for i in range(1, 15):  # a call every 9 s: each moves the run time 10 s on
            self._deb_one(storage, self._deb_call(i), T0 + 9 * SEC * i)
            want = debounce_ready_at(T0, T0 + 9 * SEC * i, 10 * SEC, 100 * SEC)
            assert job_of(storage, first.id).run_at == want
        assert job_of(storage, first.id).run_at == T0 + 100 * SEC

    def test_after_the_job_is_claimed_a_new_job_is_made(self, storage: Storage) -> None:
        first = self._deb_call(1)
        self._deb_one(storage, first, T0)
        claim_one(storage, now=T0 + 10 * SEC)
        second = self._deb_call(2)
        assert self._deb_one(storage, second, T0 + 11 * SEC) == Enqueued(second.id, JobState.QUEUED)
        assert self._deb_one(storage, self._deb_call(3), T0 + 12 * SEC).job_id == second.id
        assert job_of(storage, first.id).payload == _payload(1)

    def test_keys_do_not_mix_and_plain_enqueue_debounces_too(self, storage: Storage) -> None:
        _deb(storage)
        a, b = self._deb_call(1), self._deb_call(2, key=self.deb_key + ":other")
        storage.enqueue([a, b], now=T0)
        storage.enqueue([self._deb_call(3)], now=T0 + SEC)
        assert job_of(storage, a.id).payload == _payload(3)
        assert job_of(storage, b.id).payload == _payload(2)

    def test_debounce_racing_a_claim_either_merges_before_or_makes_a_new_job(
        self, storage: Storage
    ) -> None:
        first, later = self._deb_call(1, delay_ms=0), self._deb_call(2)
        self._deb_one(storage, first, T0)
        results = run_concurrently(
            2,
            lambda i: (
                storage.claim("w", ["default"], 5, LEASE, now=T0 + SEC)
                if i == 0
                else self._deb_one(storage, later, T0 + SEC)
            ),
        )
        claimed, enqueued = results
        assert isinstance(claimed, list) and isinstance(enqueued, Enqueued), results
        if enqueued.existing:  # merged first: the claim (if any) hands out the new call
            assert enqueued.job_id == first.id
            assert [c.payload for c in claimed] in ([], [_payload(2)]), results
        else:  # claimed first: the call is a new job
            assert [(c.id, c.payload) for c in claimed] == [(first.id, _payload(1))], results
            assert job_of(storage, later.id).state is JobState.QUEUED


class PauseContract(ContractBase):
    """Paused queues, tasks and flows are not claimed; everything else goes on."""

    @pytest.fixture(autouse=True)
    def _fresh_pause_names(self) -> None:
        self.pause_queue = f"q-{new_id()}"
        self.pause_task = f"tests.paused.{new_id()}"

    def _pause_claim(self, storage: Storage, queues: list[str], now: int) -> list[ClaimedJob]:
        return storage.claim("w", queues, 10, LEASE, now=now)

    def test_a_paused_queue_is_not_claimed_and_other_queues_are(self, storage: Storage) -> None:
        p = _pause(storage)
        assert p.pause(PauseKind.QUEUE, self.pause_queue, now=T0) is True
        mine = enqueue_one(storage, queue=self.pause_queue, now=T0 + 1)
        other = enqueue_one(storage, now=T0 + 1)
        got = self._pause_claim(storage, [self.pause_queue, "default"], T0 + SEC)
        assert [c.id for c in got] == [other]
        assert storage.count_pending([self.pause_queue], 0, now=T0 + SEC) == 0
        assert job_of(storage, mine).state is JobState.QUEUED

    def test_a_pause_of_an_unknown_kind_is_refused_and_stores_nothing(
        self, storage: Storage
    ) -> None:
        p = _pause(storage)
        for call in (p.pause, p.resume):
            with pytest.raises(ConfigError) as bad:
                call("tenant", self.pause_queue)  # type: ignore[arg-type]
            assert bad.value.code == "invalid_option" and "'tenant'" in str(bad.value)
        assert [x.name for x in p.list_paused()] == []

    def test_a_paused_task_is_not_claimed_and_its_queue_goes_on(self, storage: Storage) -> None:
        p = _pause(storage)
        held = [
            enqueue_one(storage, task_name=self.pause_task, priority=9, now=T0) for _ in range(3)
        ]
        p.pause(PauseKind.TASK, self.pause_task, now=T0 + 1)
        plain = enqueue_one(storage, now=T0 + 2)
        assert [c.id for c in self._pause_claim(storage, ["default"], T0 + SEC)] == [plain]
        assert [job_of(storage, i).state for i in held] == [JobState.QUEUED] * 3
        assert storage.count_pending(["default"], 0, now=T0 + SEC) == 1  # the running one

    def test_resume_gives_the_jobs_back_in_their_order(self, storage: Storage) -> None:
        p = _pause(storage)
        p.pause(PauseKind.TASK, self.pause_task, now=T0)
        held = [enqueue_one(storage, task_name=self.pause_task, now=T0 + i) for i in range(3)]
        assert self._pause_claim(storage, ["default"], T0 + SEC) == []
        assert p.resume(PauseKind.TASK, self.pause_task) is True
        assert p.resume(PauseKind.TASK, self.pause_task) is False
        got = storage.claim("w", ["default"], 2, LEASE, now=T0 + 2 * SEC)
        assert [c.id for c in got] == held[:2]

    def test_a_paused_flow_starts_none_of_its_steps(self, storage: Storage) -> None:
        from queue_core.storage.abilities import SupportsFlows
        from queue_core.testing.suite._flows_base import make_execution, make_spec

        if not isinstance(storage, SupportsFlows):
            pytest.skip(lacks(SupportsFlows))
        p = _pause(storage)
        name = f"paused-flow-{new_id()}"
        p.pause(PauseKind.FLOW, name, now=T0)
        paused_run = make_execution(make_spec({"a": []}, name=name))
        other_run = make_execution(make_spec({"a": []}, name=name + "-other"))
        storage.start_execution(paused_run, now=T0 + 1)
        storage.start_execution(other_run, now=T0 + 2)
        got = self._pause_claim(storage, ["default"], T0 + SEC)
        assert [c.execution_id for c in got] == [other_run.id]
        p.resume(PauseKind.FLOW, name)
        assert [c.execution_id for c in self._pause_claim(storage, ["default"], T0 + 2 * SEC)] == [
            paused_run.id
        ]

    def test_running_attempts_and_enqueues_go_on(self, storage: Storage) -> None:
        p = _pause(storage)
        first = enqueue_one(storage, queue=self.pause_queue, now=T0)
        running = claim_one(storage, now=T0 + 1, queues=[self.pause_queue])
        p.pause(PauseKind.QUEUE, self.pause_queue, now=T0 + 2)
        later = enqueue_one(storage, queue=self.pause_queue, now=T0 + 3)
        assert storage.finish([complete_end(running.ref)], now=T0 + SEC) == [True]
        assert job_of(storage, first).state is JobState.SUCCEEDED
        assert self._pause_claim(storage, [self.pause_queue], T0 + 2 * SEC) == []
        p.resume(PauseKind.QUEUE, self.pause_queue)
        assert [c.id for c in self._pause_claim(storage, [self.pause_queue], T0 + 3 * SEC)] == [
            later
        ]

    def test_pausing_twice_keeps_the_first_since(self, storage: Storage) -> None:
        p = _pause(storage)
        assert p.pause(PauseKind.QUEUE, self.pause_queue, now=T0) is True
        assert p.pause(PauseKind.QUEUE, self.pause_queue, now=T0 + MIN) is False
        (entry,) = [e for e in p.list_paused() if e.name == self.pause_queue]
        assert (entry.kind, entry.since) == (PauseKind.QUEUE, dt_from_ms(T0))

    def test_list_paused_lists_every_pause_sorted(self, storage: Storage) -> None:
        p = _pause(storage)
        p.pause(PauseKind.TASK, self.pause_task, now=T0)
        p.pause(PauseKind.QUEUE, self.pause_queue, now=T0 + 1)
        p.pause(PauseKind.FLOW, "f-" + self.pause_queue, now=T0 + 2)
        mine = {self.pause_task, self.pause_queue, "f-" + self.pause_queue}
        listed = [(e.kind, e.name) for e in p.list_paused() if e.name in mine]
        assert listed == [
            (PauseKind.FLOW, "f-" + self.pause_queue),
            (PauseKind.QUEUE, self.pause_queue),
            (PauseKind.TASK, self.pause_task),
        ]
        for kind, name in listed:
            p.resume(kind, name)
        assert [e for e in p.list_paused() if e.name in mine] == []


class ProgressContract(ContractBase):
    """A job's latest progress, written by its current attempt only."""

    def test_progress_of_the_current_attempt_is_read_back(self, storage: Storage) -> None:
        prog = _progress(storage)
        enqueue_one(storage, now=T0)
        claimed = claim_one(storage, now=T0 + 1)
        assert prog.set_progress(claimed.ref, ProgressUpdate(0.25, "a quarter"), now=T0 + SEC)
        assert prog.set_progress(claimed.ref, ProgressUpdate(0.5), now=T0 + 2 * SEC)
        got = prog.get_progress(claimed.id)
        assert got is not None
        assert (got.fraction, got.message, got.at) == (0.5, None, dt_from_ms(T0 + 2 * SEC))

    def test_progress_of_an_attempt_no_longer_current_is_refused(self, storage: Storage) -> None:
        prog = _progress(storage)
        enqueue_one(storage, now=T0)
        claimed = claim_one(storage, now=T0 + 1)
        storage.finish([complete_end(claimed.ref)], now=T0 + SEC)
        assert prog.set_progress(claimed.ref, ProgressUpdate(0.9), now=T0 + 2 * SEC) is False
        assert prog.get_progress(claimed.id) is None

    def test_finish_stores_the_progress_it_carries(self, storage: Storage) -> None:
        from dataclasses import replace

        prog = _progress(storage)
        enqueue_one(storage, now=T0)
        claimed = claim_one(storage, now=T0 + 1)
        prog.set_progress(claimed.ref, ProgressUpdate(0.4, "40 of 100"), now=T0 + SEC)
        end = replace(complete_end(claimed.ref), progress=ProgressUpdate(1.0, "done"))
        assert storage.finish([end], now=T0 + 2 * SEC) == [True]
        got = prog.get_progress(claimed.id)
        assert got is not None
        assert (got.fraction, got.message, got.at) == (1.0, "done", dt_from_ms(T0 + 2 * SEC))
        late = replace(complete_end(claimed.ref), progress=ProgressUpdate(0.1))
        assert storage.finish([late], now=T0 + 3 * SEC) == [False]
        assert prog.get_progress(claimed.id) == got

    def test_a_job_without_progress_has_none(self, storage: Storage) -> None:
        prog = _progress(storage)
        job_id = enqueue_one(storage, now=T0)
        assert prog.get_progress(job_id) is None
        assert prog.get_progress("no-such-job") is None
