"""Contract: the dead-letter store -- listing, paging, replay and purge."""

from __future__ import annotations

import pytest

from queue_core.records.errors import ConfigError, NotFound
from queue_core.records.jobs import (
    DeadJob,
    JobState,
    Outcome,
    ReapedJob,
    Reason,
)
from queue_core.rules.paging import MAX_PAGE_VALUE
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    DEFAULT_PAYLOAD,
    HOUR,
    LEASE,
    MIN,
    SEC,
    T0,
    claim_one,
    dead_end,
    enqueue_one,
    error_info,
    retry_end,
)
from queue_core.testing.suite._base import ContractBase, job_of, numbered, order_says

NEWEST = "list_dead pages dead-letter entries newest first (by dead_at)"


def kill(storage: Storage, *, at: int, task_name: str = "tests.task", **fields: object) -> str:
    """Enqueue, claim and dead-letter (``fatal``) one job at ``at``; return its entry id."""
    queue = str(fields.get("queue", "default"))
    job_id = enqueue_one(storage, now=at, task_name=task_name, **fields)
    got = claim_one(storage, now=at, queues=[queue])
    assert got.id == job_id
    assert storage.finish([dead_end(got.ref)], now=at) == [True]
    dead_id = job_of(storage, job_id).dead_id
    assert dead_id is not None
    return dead_id


class DeadLetterContract(ContractBase):
    """``list_dead``, ``get_dead``, ``retry_dead`` and ``purge_dead``."""

    def test_empty_store_lists_nothing(self, storage: Storage) -> None:
        assert storage.list_dead() == []
        assert storage.get_dead("0" * 32) is None

    def test_list_dead_is_newest_first(self, storage: Storage) -> None:
        ids = [kill(storage, at=T0 + i * SEC) for i in range(4)]
        got = [e.id for e in storage.list_dead()]
        expected = dict(reversed(numbered(ids, "dead").items()))
        assert got == list(reversed(ids)), order_says(NEWEST, got, expected)

    def test_list_dead_pages_with_offset_and_limit(self, storage: Storage) -> None:
        ids = [kill(storage, at=T0 + i * SEC) for i in range(5)]
        newest_first = list(reversed(ids))
        named = dict(reversed(numbered(ids, "dead").items()))
        for offset in (0, 2, 4):
            got = [e.id for e in storage.list_dead(2, offset)]
            page = dict(list(named.items())[offset : offset + 2])
            assert got == newest_first[offset : offset + 2], order_says(
                f"{NEWEST}; list_dead(limit=2, offset={offset}) is that page", got, page
            )
        assert storage.list_dead(2, 6) == []

    @pytest.mark.parametrize(
        ("limit", "offset", "field"),
        [(1, 2**63, "offset"), (1, 10**40, "offset"), (2**64, 0, "limit"), (-1, 0, "limit"),
         (1, -5, "offset"), (1, MAX_PAGE_VALUE + 1, "offset")],
    )  # fmt: skip
    def test_list_dead_refuses_a_page_out_of_range(
        self, storage: Storage, limit: int, offset: int, field: str
    ) -> None:
        """:func:`queue_core.rules.paging.check_page` before any read: a ``ConfigError``
        naming the field, never a driver's overflow."""
        dead_id = kill(storage, at=T0)
        with pytest.raises(ConfigError) as info:
            storage.list_dead(limit, offset)
        assert (info.value.code, info.value.field) == ("invalid_option", field)
        assert str(MAX_PAGE_VALUE) in str(info.value)
        assert [e.id for e in storage.list_dead(1, 0)] == [dead_id]
        assert storage.list_dead(MAX_PAGE_VALUE, MAX_PAGE_VALUE) == []

    def test_list_dead_filters_by_task_name(self, storage: Storage) -> None:
        a1 = kill(storage, at=T0, task_name="a")
        kill(storage, at=T0 + SEC, task_name="b")
        a2 = kill(storage, at=T0 + 2 * SEC, task_name="a")
        got = [e.id for e in storage.list_dead(task_name="a")]
        assert got == [a2, a1], order_says(
            f"{NEWEST}, only those of the task asked for", got, {"a2": a2, "a1": a1}
        )
        assert [e.id for e in storage.list_dead(1, 1, "a")] == [a1]
        assert storage.list_dead(task_name="nope") == []

    def test_get_dead_equals_the_listed_entry(self, storage: Storage) -> None:
        dead_id = kill(storage, at=T0, task_name="t.get", queue="q9", priority=4)
        entry = storage.get_dead(dead_id)
        assert entry is not None
        assert storage.list_dead() == [entry]
        assert (entry.task_name, entry.queue) == ("t.get", "q9")

    def test_dead_entry_decodes_args_and_reads_like_a_mapping(self, storage: Storage) -> None:
        dead_id = kill(storage, at=T0, payload=b'{"args":[1,"x"],"kwargs":{"k":2}}')
        entry = storage.get_dead(dead_id)
        assert isinstance(entry, DeadJob)
        assert entry.args == (1, "x")
        assert entry.kwargs == {"k": 2}
        assert entry["task_name"] == "tests.task"
        assert entry["reason"] == "fatal"
        assert entry["id"] == dead_id

    def test_dead_entry_with_a_non_json_payload_keeps_the_bytes(self, storage: Storage) -> None:
        dead_id = kill(storage, at=T0, payload=b"\x80\x04opaque")
        entry = storage.get_dead(dead_id)
        assert entry is not None
        assert entry.payload == b"\x80\x04opaque"
        assert (entry.args, entry.kwargs) == ((), {})

    def test_retry_dead_enqueues_a_fresh_job_and_removes_the_entry(self, storage: Storage) -> None:
        job_id = enqueue_one(
            storage, task_name="t.replay", priority=6, max_attempts=3, options='{"o":1}'
        )
        for i in range(3):
            got = claim_one(storage, now=T0 + i * LEASE)
            storage.reap(now=T0 + (i + 1) * LEASE)
        dead_id = job_of(storage, job_id).dead_id
        assert dead_id is not None and got.attempt == 3
        now = T0 + 10 * LEASE
        new_id = storage.retry_dead(dead_id, now=now)
        # a job id as enqueue's (queue_core.storage.job_ids.new_job_id): time-ordered, so
        # made after the first job's, it sorts after it
        assert len(new_id) == 32 and new_id[12] == "7" and new_id > job_id, (new_id, job_id)
        assert storage.get_dead(dead_id) is None
        assert storage.list_dead() == []
        rec = job_of(storage, new_id)
        assert rec.state is JobState.QUEUED
        assert (rec.task_name, rec.queue, rec.priority) == ("t.replay", "default", 6)
        assert (rec.attempts, rec.max_attempts) == (0, 3)
        assert rec.payload == DEFAULT_PAYLOAD
        assert rec.options == '{"replays":1,"o":1}'  # the replay is counted
        assert rec.replay_of == dead_id
        assert (rec.enqueued_at, rec.run_at) == (now, now)
        again = claim_one(storage, now=now)
        assert (again.id, again.attempt, again.replay_of) == (new_id, 1, dead_id)
        assert job_of(storage, job_id).state is JobState.DEAD

    def test_retry_dead_replays_the_job_as_it_was_enqueued(self, storage: Storage) -> None:
        """Same task, payload, priority, options (plus the replay count), attempts, timeouts
        and concurrency; the
        attempt-1 ``lost_delay_ms`` although a retry changed it; the queue given; ready
        now; ``replay_of`` the entry; a fresh attempt budget."""
        payload = b'{"args":[7],"kwargs":{}}'
        job_id = enqueue_one(
            storage,
            task_name="t.spec",
            queue="q-old",
            payload=payload,
            priority=3,
            max_attempts=2,
            lost_delay_ms=5 * SEC,
            timeout_ms=MIN,
            heartbeat_ms=20 * SEC,
            concurrency_key="spec-key",
            concurrency_limit=1,
            options='{"tag":"x"}',
        )
        first = claim_one(storage, now=T0, queues=["q-old"])
        storage.finish([retry_end(first.ref, 0, lost_delay_ms=45 * SEC)], now=T0 + SEC)
        claim_one(storage, now=T0 + SEC, queues=["q-old"], lease_ms=5 * SEC)
        assert [r.state for r in storage.reap(now=T0 + 6 * SEC)] == [JobState.DEAD]
        dead_id = job_of(storage, job_id).dead_id
        assert dead_id is not None

        now = T0 + HOUR
        new_id = storage.retry_dead(dead_id, "q-new", now=now)
        rec = job_of(storage, new_id)
        assert (rec.state, rec.task_name, rec.queue, rec.payload) == (
            JobState.QUEUED,
            "t.spec",
            "q-new",
            payload,
        )
        assert (rec.priority, rec.options, rec.attempts, rec.max_attempts) == (
            3,
            '{"replays":1,"tag":"x"}',
            0,
            2,
        )
        assert (rec.replay_of, rec.enqueued_at, rec.run_at) == (dead_id, now, now)
        got = claim_one(storage, now=now, queues=["q-new"], lease_ms=5 * SEC)
        assert (got.id, got.attempt, got.replay_of) == (new_id, 1, dead_id)
        assert (got.timeout_ms, got.heartbeat_ms, got.deadline) == (MIN, 20 * SEC, now + MIN)
        # the concurrency key and limit came along: another job of the key must wait
        enqueue_one(
            storage, now=now, queue="q-new", concurrency_key="spec-key", concurrency_limit=1
        )
        assert storage.claim("w", ["q-new"], 5, LEASE, now=now) == []
        # lost: queued again (attempt 1 of 2) after the attempt-1 lost delay, 5 s
        assert storage.reap(now=now + 5 * SEC) == [
            ReapedJob(
                job_id=new_id,
                attempt=1,
                outcome=Outcome.LOST,
                reason=Reason.LEASE_EXPIRED.value,
                state=JobState.QUEUED,
            )
        ]
        assert job_of(storage, new_id).run_at == now + 10 * SEC

    def test_retry_dead_keeps_schedule_to_start(self, storage: Storage) -> None:
        dead_id = kill(storage, at=T0, schedule_to_start_ms=10 * SEC)
        now = T0 + HOUR
        new_id = storage.retry_dead(dead_id, now=now)
        assert storage.reap(now=now + 10 * SEC - 1) == []
        assert storage.reap(now=now + 10 * SEC) == [
            ReapedJob(
                job_id=new_id,
                attempt=0,
                outcome=None,
                reason=Reason.SCHEDULE_TO_START.value,
                state=JobState.DEAD,
            )
        ]

    def test_retry_dead_can_move_the_job_to_another_queue(self, storage: Storage) -> None:
        dead_id = kill(storage, at=T0, queue="original")
        new_id = storage.retry_dead(dead_id, "elsewhere", now=T0 + SEC)
        assert job_of(storage, new_id).queue == "elsewhere"
        assert storage.claim("w", ["original"], 5, LEASE, now=T0 + SEC) == []
        assert claim_one(storage, now=T0 + SEC, queues=["elsewhere"]).id == new_id

    def test_replayed_job_that_dies_again_remembers_replay_of(self, storage: Storage) -> None:
        first = kill(storage, at=T0)
        new_id = storage.retry_dead(first, now=T0 + SEC)
        got = claim_one(storage, now=T0 + SEC)
        storage.finish([dead_end(got.ref)], now=T0 + 2 * SEC)
        second = job_of(storage, new_id).dead_id
        assert second is not None and second != first
        entry = storage.get_dead(second)
        assert entry is not None
        assert (entry.job_id, entry.replay_of) == (new_id, first)

    def test_retry_dead_counts_the_replays_of_a_chain_in_the_options(
        self, storage: Storage
    ) -> None:
        """``replay_job``: each replay counts itself in the job's options, the member
        ``"replays"`` first, every other member kept as written -- so the count that
        bounds auto-replay (``max_replays``) is stored with the job."""
        for options, counted in [
            ('{"policy":{"max_attempts":2},"retry_on":["m.E"],"z":[],"f":0.1}',
             '{"replays":%d,"policy":{"max_attempts":2},"retry_on":["m.E"],"z":[],"f":0.1}'),
            (None, '{"replays":%d}'),
        ]:  # fmt: skip
            expected = [options, counted % 1, counted % 2]
            job_id = enqueue_one(storage, now=T0, options=options)
            at = T0
            for n in (1, 2):
                got = claim_one(storage, now=at)
                assert (got.id, got.options) == (job_id, expected[n - 1])
                assert storage.finish([dead_end(got.ref)], now=at) == [True]
                dead_id = job_of(storage, job_id).dead_id
                assert dead_id is not None
                at += SEC
                job_id = storage.retry_dead(dead_id, now=at)
                rec = job_of(storage, job_id)
                assert (rec.options, rec.replay_of) == (expected[n], dead_id)
            got = claim_one(storage, now=at)
            assert (got.id, got.options) == (job_id, expected[2])
            assert storage.finish([dead_end(got.ref)], now=at) == [True]

    def test_retry_dead_of_an_unknown_id_raises_not_found(self, storage: Storage) -> None:
        with pytest.raises(NotFound):
            storage.retry_dead("0" * 32, now=T0)

    def test_retry_dead_twice_raises_not_found_the_second_time(self, storage: Storage) -> None:
        dead_id = kill(storage, at=T0)
        storage.retry_dead(dead_id, now=T0 + SEC)
        with pytest.raises(NotFound):
            storage.retry_dead(dead_id, now=T0 + 2 * SEC)
        assert storage.stats(now=T0 + 2 * SEC)[0].ready == 1

    def test_purge_dead_by_task_name(self, storage: Storage) -> None:
        kill(storage, at=T0, task_name="a")
        keep = kill(storage, at=T0 + SEC, task_name="b")
        kill(storage, at=T0 + 2 * SEC, task_name="a")
        assert storage.purge_dead("a") == 2
        assert [e.id for e in storage.list_dead()] == [keep]
        assert storage.purge_dead("a") == 0

    def test_purge_dead_before_is_inclusive(self, storage: Storage) -> None:
        old = kill(storage, at=T0)
        edge = kill(storage, at=T0 + 10 * SEC)
        new = kill(storage, at=T0 + 10 * SEC + 1)
        assert storage.purge_dead(before=T0 + 10 * SEC) == 2
        assert [e.id for e in storage.list_dead()] == [new]
        assert storage.get_dead(old) is None and storage.get_dead(edge) is None

    def test_purge_dead_by_task_and_before(self, storage: Storage) -> None:
        kill(storage, at=T0, task_name="a")
        b_old = kill(storage, at=T0, task_name="b")
        a_new = kill(storage, at=T0 + MIN, task_name="a")
        assert storage.purge_dead("a", T0 + SEC) == 1
        assert sorted(e.id for e in storage.list_dead()) == sorted([b_old, a_new])

    def test_purge_dead_everything(self, storage: Storage) -> None:
        for i in range(3):
            kill(storage, at=T0 + i)
        assert storage.purge_dead() == 3
        assert storage.list_dead() == []

    def test_dead_entry_records_the_final_error(self, storage: Storage) -> None:
        job_id = enqueue_one(storage)
        got = claim_one(storage, now=T0)
        err = error_info("PermissionError", "denied: ünïcødé ✓")
        storage.finish(
            [dead_end(got.ref, dead_reason=Reason.UNKNOWN_TASK.value, error=err)], now=T0
        )
        dead_id = job_of(storage, job_id).dead_id
        assert dead_id is not None
        entry = storage.get_dead(dead_id)
        assert entry is not None
        assert (entry.error, entry.error_class, entry.reason) == (
            "denied: ünïcødé ✓",
            "PermissionError",
            "unknown_task",
        )
