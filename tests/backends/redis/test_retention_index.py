"""The Redis retention index: the stream ``P:fins`` (one entry per finish batch) and the
sorted set ``P:fin`` beside it (finishes older than the stream's last entry, the rest of
an entry pruned in part, and the index of versions before the stream). What every
backend must do is the contract's (``PruneContract``); these check the two structures
meet it together."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from backends.redis import RedisStorage
from queue_core.testing import DAY, LEASE, T0
from queue_core.testing.fixtures import complete_end, new_job
from tests.servers.redis import RedisServer


@pytest.fixture
def kept_a_day(redis_server: RedisServer) -> Iterator[RedisStorage]:
    s = RedisStorage.from_url(redis_server.url(prefix=f"t{uuid.uuid4().hex[:12]}", retention="1d"))
    try:
        yield s
    finally:
        s.close()


def _finish(s: RedisStorage, count: int, now: int) -> list[str]:
    """Enqueue, claim and complete ``count`` jobs at ``now``, finished in one call."""
    jobs = [new_job() for _ in range(count)]
    s.enqueue(jobs, now=now)
    claimed = s.claim("w", ["default"], count, LEASE, now=now)
    assert len(claimed) == count
    assert s.finish([complete_end(c.ref) for c in claimed], now=now) == [True] * count
    return [j.id for j in jobs]


def _index(s: RedisStorage, raw: redis.Redis[bytes]) -> tuple[int, int]:
    """(entries in the stream, members of the sorted set)."""
    p = s.store.key_prefix
    return raw.xlen(f"{p}:fins"), raw.zcard(f"{p}:fin")


def test_a_finish_batch_is_one_entry_and_is_pruned_in_parts(
    kept_a_day: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    s = kept_a_day
    ids = _finish(s, 5, T0)
    assert _index(s, raw) == (1, 0)
    assert s.prune(now=T0 + DAY, limit=2) == 2
    assert _index(s, raw) == (0, 3)  # the entry's rest waits in the sorted set, still due
    assert s.prune(now=T0 + DAY, limit=2) == 2
    assert s.prune(now=T0 + DAY, limit=2) == 1
    assert s.prune(now=T0 + DAY, limit=2) == 0
    assert [s.get_job(i) for i in ids] == [None] * 5
    assert s.stats(now=T0 + DAY) == []
    assert _index(s, raw) == (0, 0)


def test_a_finish_older_than_the_last_entry_is_kept_its_own_time(
    kept_a_day: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    s = kept_a_day
    [late] = _finish(s, 1, T0 + 10)
    [early] = _finish(s, 1, T0 + 5)  # a clock behind the first finisher's
    assert _index(s, raw) == (1, 1)
    assert s.prune(now=T0 + 4 + DAY) == 0
    assert s.prune(now=T0 + 5 + DAY) == 1
    assert s.get_job(early) is None and s.get_job(late) is not None
    assert s.prune(now=T0 + 9 + DAY) == 0
    assert s.prune(now=T0 + 10 + DAY) == 1
    assert s.get_job(late) is None
    assert s.stats(now=T0 + 10 + DAY) == []


def test_an_index_written_before_the_stream_is_still_pruned(
    kept_a_day: RedisStorage, raw: redis.Redis[bytes]
) -> None:
    """A storage written by a version before the stream: its kept jobs are members of
    the sorted set only, and their hashes name no entry."""
    s = kept_a_day
    [old] = _finish(s, 1, T0)
    p = s.store.key_prefix
    [(entry, _)] = raw.xrange(f"{p}:fins")
    raw.xdel(f"{p}:fins", entry)
    raw.hdel(f"{p}:j:{old}", "fx")
    raw.zadd(f"{p}:fin", {f"succeeded|{old}|default": T0})
    [new] = _finish(s, 1, T0 + 1)
    assert s.prune(now=T0 + DAY) == 1
    assert s.get_job(old) is None and s.get_job(new) is not None
    assert s.prune(now=T0 + 1 + DAY) == 1
    assert s.stats(now=T0 + 1 + DAY) == []
    assert _index(s, raw) == (0, 0)
