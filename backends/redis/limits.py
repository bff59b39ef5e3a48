"""Unique jobs and rate limits of the Redis backend (standalone and Cluster).

Both are applied inside the Lua scripts of the operations they guard, so each check and
its write are one atomic step on the server, judged by the scripts' clock (Redis
``TIME`` unless the caller passes ``now``):

* ``enqueue.lua`` looks up ``P:u:<key>`` (the last job stored with a unique key) and the
  holder's state, and stores a job only when its key is free
  (:func:`queue_core.policy.limits.unique_holds`, mirrored in Lua); ``prune.lua``
  deletes the key with the last job it names.
* ``claim.lua`` claims a rate-limited job only while ``P:rt:<key>``, a zset of the
  key's claim times trimmed to the window and expiring with it, holds fewer than the
  limit (:func:`queue_core.policy.limits.rate_grant`, mirrored in Lua); a job over
  the rate stays in its ready set. Jobs without a rate key skip the check.

On a cluster every key carries the storage's hash tag, so the scripts stay in one slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.commands.core import Script

from backends.redis.errors import translate_errors
from backends.redis.flow_records import job_args
from backends.redis.scripts import opt
from queue_core.errors import StorageError
from queue_core.model import Enqueued, JobState, NewJob

__all__ = ["RedisLimits", "enqueue_args"]


def enqueue_args(j: NewJob) -> tuple[Any, ...]:
    """The 22 arguments of one job for ``enqueue.lua``."""
    return (
        *job_args(j),
        opt(j.replay_of),
        opt(j.unique_key),
        opt(j.unique_for_ms),
        opt(j.rate_key),
        opt(j.rate_limit),
        opt(j.rate_window_ms),
    )


_NO_OPTIONS = (None,) * 8


def _is_plain(j: NewJob) -> bool:
    """True when ``enqueue_plain.lua`` stores ``j`` exactly as ``enqueue.lua`` would."""
    return (
        not j.concurrency_skip
        and (
            j.unique_key,
            j.rate_key,
            j.replay_of,
            j.concurrency_key,
            j.concurrency_limit,
            j.heartbeat_ms,
            j.schedule_to_start_ms,
            j.options,
        )
        == _NO_OPTIONS
    )


class RedisLimits:
    """:class:`~queue_core.storage.SupportsUniqueJobs` and
    :class:`~queue_core.storage.SupportsRateLimits` for
    :class:`~backends.redis.storage.RedisStorage`."""

    _r: Any
    _enqueue: Script
    _plain_script: Script | None = None  # enqueue_plain.lua, registered on first use
    _one_script: Script | None = None  # enqueue_one.lua (a batch of one), idem
    key_prefix: str

    def _args(self, now: int | None) -> list[Any]:  # pragma: no cover - RedisStorage's
        raise NotImplementedError

    def _run(self, script: Script, args: list[Any]) -> Any:  # pragma: no cover - idem
        raise NotImplementedError

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        """See :meth:`queue_core.storage.SupportsUniqueJobs.enqueue_unique`. A batch is
        all-or-nothing."""
        if not jobs:
            return []
        if all(map(_is_plain, jobs)):
            self._enqueue_plain(jobs, now)
            return [Enqueued(j.id, JobState.QUEUED) for j in jobs]
        args = self._args(now)
        for j in jobs:
            args += enqueue_args(j)
        with translate_errors("enqueue"):
            res = self._run(self._enqueue, args)
        if res and res[0] == b"dup":
            raise StorageError(f"job id {res[1].decode()!r} already exists")
        out: list[Enqueued] = []
        for j, x in zip(jobs, res, strict=True):
            if isinstance(x, list):
                out.append(Enqueued(x[0].decode(), JobState(x[1].decode()), existing=True))
            else:
                out.append(Enqueued(j.id, JobState.QUEUED if x else JobState.SKIPPED))
        return out

    def _enqueue_states(self, jobs: Sequence[NewJob], now: int | None) -> list[JobState]:
        """:meth:`RedisStorage.enqueue`: plain jobs straight to :meth:`_enqueue_plain`
        (the single-enqueue hot path builds no :class:`Enqueued`), others through
        :meth:`enqueue_unique`."""
        if jobs and all(map(_is_plain, jobs)):
            self._enqueue_plain(jobs, now)
            return [JobState.QUEUED] * len(jobs)
        return [e.state for e in self.enqueue_unique(jobs, now=now)]

    def _enqueue_plain(self, jobs: Sequence[NewJob], now: int | None) -> None:
        """``enqueue_plain.lua``: the jobs ``enqueue.lua`` would store, for jobs with no
        unique, rate or concurrency key and no optional field but a timeout; 10 arguments
        per job instead of 22 (measured in docs/backends/redis.md); a single job through
        ``enqueue_one.lua``, the same writes without a prelude's closures. Each job is
        queued."""
        args = self._args(now)
        for j in jobs:
            run_at, timeout = j.run_at, j.timeout_ms
            args += (
                j.id,
                j.task_name,
                j.queue,
                j.payload,
                j.priority,
                "" if run_at is None else run_at,
                j.delay_ms,
                j.max_attempts,
                j.lost_delay_ms,
                "" if timeout is None else timeout,
            )
        self._run_plain(args, len(jobs))

    def _run_plain(self, args: list[Any], n: int) -> None:
        """Run ``enqueue_plain.lua`` (``enqueue_one.lua`` when ``n`` is 1) with ``args``."""
        script = self._plain_script if n > 1 else self._one_script
        if script is None:
            script = self._register_enqueue(n > 1)
        with translate_errors("enqueue"):
            res = self._run(script, args)
        if isinstance(res, list) and res and res[0] == b"dup":
            raise StorageError(f"job id {res[1].decode()!r} already exists")

    def _register_enqueue(self, batch: bool) -> Script:
        from backends.redis.storage import _load_script  # storage imports this module

        script: Script = self._r.register_script(
            _load_script("enqueue_plain" if batch else "enqueue_one")
        )
        if batch:
            self._plain_script = script
        else:
            self._one_script = script
        return script

    def rate_usage(self, rate_key: str, window_ms: int, *, now: int | None = None) -> int:
        """See :meth:`queue_core.storage.SupportsRateLimits.rate_usage`."""
        with translate_errors("rate usage"):
            if now is None:
                sec, usec = self._r.time()
                now = int(sec) * 1000 + int(usec) // 1000
            key = f"{self.key_prefix}:rt:{rate_key}"
            return int(self._r.zcount(key, f"({now - window_ms}", now))
