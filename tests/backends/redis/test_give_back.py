"""Held attempts given back on Redis (``give_back.lua``, ``SupportsGiveBack``): the claim is
undone field by field -- the ready-set score it had, the previous attempt's start, the
schedule-to-start index -- and the jobs whose claim it does not undo are refused untouched."""

from __future__ import annotations

import re

import pytest
import redis

from backends.redis import RedisStorage
from backends.redis.scripts import load_script, lua_text
from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    ClaimedJob,
    Decision,
    JobState,
    LeaseRef,
    Outcome,
)
from queue_core.testing.fixtures import (
    LEASE,
    SEC,
    T0,
    complete_end,
    enqueue_one,
    new_job,
    retry_end,
)
from queue_core.testing.suite._flows_base import make_execution, make_spec


def _ahead(storage: RedisStorage, now: int, queue: str = "default") -> ClaimedJob:
    (got,) = storage.claim_ahead("w", [queue], 1, LEASE, now=now)
    return got


def test_the_script_loads_whole_and_defines_what_it_calls() -> None:
    lib = lua_text("_lib")
    every = set(re.findall(r"local function (\w+)", lib))
    body = lua_text("give_back")
    called = {f for f in every if re.search(rf"\b{f}\(", body)}
    assert {"release_slot", "count", "wake", "zop"} <= called
    for cluster in (False, True):
        text = load_script("give_back", cluster)
        assert "-- #include " not in text and "-- #cluster " not in text


def test_a_job_given_back_takes_the_ready_set_score_the_claim_took_it_from(
    storage: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    """A job reaped with its place kept ('po', before its new ready time) goes back at
    that place, with its member (its enqueue order), not at its ready time."""
    job_id = enqueue_one(storage, max_attempts=3, lost_delay_ms=SEC, now=T0)
    member = raw.hget(storage.keys.job(job_id), "mem")
    storage.claim("w", ["default"], 1, LEASE, now=T0 + SEC)  # started: a reap spends it
    storage.reap(now=T0 + SEC + LEASE)  # lost: ready a second later, its place kept
    again = _ahead(storage, T0 + 3 * SEC + LEASE)
    ready = f"{storage.key_prefix}:r:default:0"
    assert (again.id, again.attempt) == (job_id, 2) and raw.zcard(ready) == 0
    assert storage.give_back([again.ref], now=T0 + 4 * SEC + LEASE) == [True]
    assert raw.zrange(ready, 0, -1, withscores=True) == [(member, float(T0))]
    assert raw.zscore(f"{storage.key_prefix}:run", job_id) is None
    job = storage.get_job(job_id)
    assert job is not None and (job.state, job.attempts) == (JobState.QUEUED, 1)
    assert job.run_at == T0 + 2 * SEC + LEASE
    assert [a.number for a in storage.list_attempts(job_id)] == [1]


@pytest.mark.parametrize("kept_in", ["hash", "list"])
def test_a_retried_job_given_back_shows_its_previous_attempt_again(
    storage: RedisStorage, raw: redis.Redis[bytes], kept_in: str
) -> None:
    """Its start is the previous attempt's again, read from that attempt's record (kept in
    the job hash, 'la', or in its attempt list)."""
    job_id = enqueue_one(storage, max_attempts=3, now=T0)
    first = _ahead(storage, T0 + SEC)
    assert storage.start_claimed([first.ref], now=T0 + 2 * SEC) == [True]
    end = retry_end(first.ref, delay_ms=0)
    if kept_in == "hash":
        end = AttemptEnd(
            ref=first.ref, outcome=Outcome.FAILED, decision=Decision(action=Action.RETRY)
        )
    assert storage.finish([end], now=T0 + 3 * SEC) == [True]
    assert raw.hexists(storage.keys.job(job_id), "la") == (kept_in == "hash")
    before = storage.get_job(job_id)
    held = _ahead(storage, T0 + 4 * SEC)
    assert storage.give_back([held.ref], now=T0 + 5 * SEC) == [True]
    after = storage.get_job(job_id)
    assert before is not None and after is not None
    assert after.started_at == before.started_at == T0 + 2 * SEC
    assert raw.hget(storage.keys.job(job_id), "wid") == b"w"
    assert (after.state, after.attempts, after.max_attempts) == (JobState.QUEUED, 1, 3)
    (again,) = storage.claim("w2", ["default"], 1, LEASE, now=T0 + 6 * SEC)
    assert again.attempt == 2
    assert storage.finish([complete_end(again.ref)], now=T0 + 7 * SEC) == [True]
    assert [a.number for a in storage.list_attempts(job_id)] == [1, 2]


def test_a_job_given_back_is_bound_by_schedule_to_start_again(storage: RedisStorage) -> None:
    job_id = enqueue_one(storage, schedule_to_start_ms=10 * SEC, now=T0)
    held = _ahead(storage, T0 + SEC)
    assert storage.give_back([held.ref], now=T0 + 2 * SEC) == [True]
    assert storage.reap(now=T0 + 10 * SEC - 1) == []
    (reaped,) = storage.reap(now=T0 + 10 * SEC)
    assert (reaped.job_id, reaped.reason) == (job_id, "schedule_to_start")


def test_jobs_whose_claim_is_not_undone_are_refused_untouched(
    storage: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    """A flow step, a round_robin job and a job asked to cancel stay running as they
    were (the worker releases them); a stale ref changes nothing either."""
    storage.start_execution(make_execution(make_spec({"x": []}), queue="flows"), now=T0)
    step = _ahead(storage, T0 + 1, "flows")
    rr = {"concurrency_limit": 2, "concurrency_behavior": "round_robin"}
    storage.enqueue([new_job(queue="rr", concurrency_key="g:k", **rr)], now=T0)
    turn = _ahead(storage, T0 + 1, "rr")
    enqueue_one(storage, queue="c", now=T0)
    asked = _ahead(storage, T0 + 1, "c")
    assert storage.cancel(asked.id, now=T0 + 2) is JobState.RUNNING
    enqueue_one(storage, now=T0)
    plain = _ahead(storage, T0 + 1)
    stale = LeaseRef(plain.id, plain.attempt, plain.lease_token + "x")
    refs = [step.ref, turn.ref, asked.ref, stale]
    keys = [storage.keys.job(j.id) for j in (step, turn, asked, plain)]
    before = [raw.hgetall(k) for k in keys]
    assert storage.give_back(refs, now=T0 + 3) == [False] * 4
    assert [raw.hgetall(k) for k in keys] == before
    assert storage.give_back([], now=T0 + 3) == []
    assert storage.give_back([plain.ref], now=T0 + 3) == [True]
