"""An attempt's life on Redis: claim, lease renewal, heartbeat, finish and the reaper.

Each is one Lua script (``claim.lua``, ``renew.lua``, ``heartbeat.lua``, ``finish.lua``,
``reap.lua``) run through the storage's lean call path; this mixin packs their arguments
and decodes their replies. A step job's end returns its execution id, advanced at once
(:mod:`backends.redis.flows`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from redis.commands.core import Script

from backends.redis.claimed import decode_claimed
from backends.redis.errors import translate_errors
from backends.redis.records import OUTCOMES, STATES
from backends.redis.scripts import opt
from queue_core.errors import LeaseLost
from queue_core.model import AttemptEnd, ClaimedJob, LeaseRef, ReapedJob, RenewResult
from queue_core.policy.outcomes import end_state

__all__ = ["RedisAttempts"]


class RedisAttempts:
    """:meth:`claim`, :meth:`renew`, :meth:`heartbeat`, :meth:`finish` and :meth:`reap`
    of :class:`~backends.redis.RedisStorage`."""

    _claim: Script
    _renew: Script
    _heartbeat: Script
    _finish: Script
    _reap: Script
    _info_cache: dict[tuple[str, str | None, str], str]

    if TYPE_CHECKING:  # provided by RedisStorage and RedisFlows

        def _args(self, now: int | None) -> list[Any]: ...
        def _call(self, script: Script, args: list[Any]) -> Any: ...
        def _run(self, script: Script, args: list[Any]) -> Any: ...
        def _flow_now(self, now: int | None) -> int: ...
        def _after_ends(self, eids: Sequence[str], now: int | None) -> None: ...
        def _reap_flows_first(self, now: int, limit: int) -> list[ReapedJob]: ...
        def _reap_flows_after(self, now: int, limit: int) -> list[ReapedJob]: ...

    def _info(self, end: AttemptEnd) -> str:
        err = end.error
        if err is None:
            key = (end.outcome.value, end.reason, end.mode)
            cached = self._info_cache.get(key)
            if cached is None:
                cached = json.dumps([key[0], key[1], None, None, None, None, key[2]])
                if len(self._info_cache) < 256:
                    self._info_cache[key] = cached
            return cached
        return json.dumps(
            [
                end.outcome.value,
                end.reason,
                err.error_class,
                err.error_type,
                err.message,
                err.traceback,
                end.mode,
            ]
        )

    # ------------------------------------------------------------------ claim / lease

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        """See :meth:`queue_core.storage.Storage.claim`."""
        if limit <= 0 or not queues:
            return []
        args = self._claim_args(worker_id, queues, limit, lease_ms, now)
        with translate_errors("claim"):
            r = self._run(self._claim, args)
        return decode_claimed(r)

    def _claim_args(
        self, worker_id: str, queues: Sequence[str], limit: int, lease_ms: int, now: int | None
    ) -> list[Any]:
        """The claim script's arguments (also sent by ``wait_and_claim``); a fresh lease
        token prefix per call."""
        args = self._args(now)
        args += (worker_id, limit, lease_ms, os.urandom(6).hex() + ".")
        args += dict.fromkeys(queues)
        return args

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """See :meth:`queue_core.storage.Storage.renew`."""
        if not refs:
            return RenewResult()
        args = self._args(now)
        args.append(lease_ms)
        for ref in refs:
            args += (ref.job_id, ref.attempt, ref.lease_token)
        with translate_errors("renew"):
            codes = self._run(self._renew, args)
        # 0: not current, 1: current, 2: current and asked to cancel
        return RenewResult.of(refs, [None if c == 0 else c == 2 for c in codes])

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.Storage.heartbeat`."""
        args = self._args(now)
        args += (ref.job_id, ref.attempt, ref.lease_token)
        with translate_errors("heartbeat"):
            code = self._run(self._heartbeat, args)
        if code < 0:
            raise LeaseLost(f"attempt {ref.attempt} of job {ref.job_id} is not current")
        return bool(code)

    # ------------------------------------------------------------------ attempt end

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.Storage.finish`."""
        if not ends:
            return []
        args = self._args(now)
        for end in ends:
            ref, d, err = end.ref, end.decision, end.error
            state, job_reason = end_state(d, end.reason)
            args += (
                ref.job_id,
                ref.attempt,
                ref.lease_token,
                state.value,
                d.delay_ms,
                opt(d.lost_delay_ms),
                opt(job_reason),
                "0" if end.result is None else "1",
                b"" if end.result is None else end.result,
                self._info(end),
                "" if err is None else err.message,
                "" if err is None else err.error_class,
            )
        with translate_errors("finish"):
            took = self._run(self._finish, args)
        # a step job's end returns its execution id: advance it now (reap() would later)
        self._after_ends([x.decode() for x in took if isinstance(x, bytes)], now)
        return [x != 0 for x in took]

    # ------------------------------------------------------------------ reaper

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        """See :meth:`queue_core.storage.Storage.reap`."""
        if limit <= 0:
            return []
        t = self._flow_now(now)
        flows = self._reap_flows_first(t, limit)
        args = self._args(t)
        args.append(max(limit - len(flows), 0))
        with translate_errors("reap"):
            r = self._call(self._reap, args) if len(flows) < limit else []
        reaped = [
            ReapedJob(
                job_id=r[i].decode(),
                attempt=r[i + 1],
                outcome=None if r[i + 2] is None else OUTCOMES[r[i + 2].decode()],
                reason=r[i + 3].decode(),
                state=STATES[r[i + 4]],
            )
            for i in range(0, len(r), 5)
        ]
        return flows + reaped + self._reap_flows_after(t, limit)
