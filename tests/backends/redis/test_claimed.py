"""Decoding of claim.lua's reply (backends/redis/claimed.py) without a server."""

from __future__ import annotations

from typing import Any

import pytest

from backends.redis.claimed import FIELDS, claim_pins, decode_claimed
from queue_core.records.jobs import ClaimedJob

FULL: list[Any] = [
    b"j1", b"app.t", b"q", b"{}", 2, b"tok", 1000, 2000, b"5", b"-3",
    b"30000", b"3000", b'{"isolation":"process"}', b"900", b"j0", 950, b"e1", b"s1",
    b"4000", b"940", 1100,
]  # fmt: skip
BARE: list[Any] = [
    b"j2", b"app.u", b"default", b"", 1, b"t2", 1000, None, b"3", b"0",
    None, None, None, b"900", None, 950, None, None, None, None, None,
]  # fmt: skip


def _by_init(r: list[Any]) -> ClaimedJob:
    """The record ClaimedJob's own __init__ builds from one job's reply."""

    def opt_int(v: Any) -> int | None:
        return None if v is None else int(v)

    def opt_str(v: Any) -> str | None:
        return None if v is None else v.decode()

    return ClaimedJob(
        id=r[0].decode(), task_name=r[1].decode(), queue=r[2].decode(), payload=r[3],
        attempt=r[4], lease_token=r[5].decode(), lease_expires_at=r[6], deadline=r[7],
        max_attempts=int(r[8]), priority=int(r[9]), timeout_ms=opt_int(r[10]),
        heartbeat_ms=opt_int(r[11]), options=opt_str(r[12]), enqueued_at=int(r[13]),
        replay_of=opt_str(r[14]), started_at=r[15], execution_id=opt_str(r[16]),
        step_id=opt_str(r[17]), flow_deadline_at=opt_int(r[18]), run_at=opt_int(r[19]),
        start_by=r[20],
    )  # fmt: skip


@pytest.mark.parametrize("reply", [FULL, BARE, FULL + BARE, []])
def test_decoded_records_equal_those_init_builds(reply: list[Any]) -> None:
    jobs, ends, corrupt = decode_claimed(reply)
    assert (ends, corrupt) == ([], [])
    expected = [_by_init(reply[i : i + FIELDS]) for i in range(0, len(reply), FIELDS)]
    assert jobs == expected  # compares every field: an unset slot would raise
    for job, built in zip(jobs, expected, strict=True):
        assert hash(job) == hash(built)
        with pytest.raises(AttributeError):  # as frozen as any other record
            job.id = "other"  # type: ignore[misc]


def test_a_job_that_does_not_decode_is_ended_corrupt_and_its_neighbours_kept() -> None:
    bad = list(FULL)
    bad[1] = b"\xff\xfe"  # a task name that is not UTF-8
    jobs, ends, _ = decode_claimed(BARE + bad + BARE)
    assert [j.id for j in jobs] == [BARE[0].decode(), BARE[0].decode()]
    assert [(e.ref.job_id, e.decision.reason) for e in ends] == [
        (FULL[0].decode(), "corrupt_record")
    ]
    assert ends[0].error is not None and "task_name" in ends[0].error.message


PINS: list[Any] = [b"qa", b"qb"]
"""A cluster's trailing list: the named queues that also have jobs in the shared home."""
CORRUPT: list[Any] = [b"j9", b"q", b"0"]


@pytest.mark.parametrize(
    ("reply", "ids", "corrupt", "pins"),
    [
        (FULL + [PINS], ["j1"], [], PINS),
        ([PINS], [], [], PINS),  # no job claimed, the pins alone: not a corrupt reply
        ([FULL + BARE, CORRUPT], ["j1", "j2"], CORRUPT, []),
        ([FULL + [PINS], CORRUPT], ["j1"], CORRUPT, PINS),
        ([[PINS], CORRUPT], [], CORRUPT, PINS),
        ([[], CORRUPT], [], CORRUPT, []),
    ],
)
def test_a_cluster_reply_with_pins_and_corrupt_jobs_is_taken_apart(
    reply: list[Any], ids: list[str], corrupt: list[Any], pins: list[Any]
) -> None:
    jobs, ends, left = decode_claimed(reply, "@qa")
    assert [j.id for j in jobs] == ids
    assert all(j.lease_token.endswith("@qa") for j in jobs)
    assert (ends, left, claim_pins(reply)) == ([], corrupt, pins)


def test_a_salvaged_job_keeps_its_home_in_the_token() -> None:
    bad = list(FULL)
    bad[1] = b"\xff\xfe"
    _, ends, _ = decode_claimed(bad, "@qa")
    assert ends[0].ref.lease_token == "tok@qa"
