"""An idle worker's wake-up and claim in one round trip (``SupportsWaitClaim``).

:meth:`RedisWaitClaim.wait_and_claim` sends the ``BLPOP`` on the queues' wake-up lists
and the claim's ``EVALSHA`` together on one connection of the wake-up client: Redis runs
the queued ``EVALSHA`` as soon as the ``BLPOP`` returns (a token arrived) or times out, so
the claim needs no round trip of its own after the wake-up. The claim runs at the
server's time, after the wait, exactly as a ``claim`` call made then would: a token taken
by a wait whose claim finds nothing strands nothing (the job it announced was claimed by
another worker, and every token is pushed by a script that made a job ready).

Before it blocks it asks ``next_ready`` (read only) how long until a job may be
claimable, as :meth:`~backends.redis.RedisStorage.wait_for_jobs` does: a delayed job
falling due pushes no token, so the wait ends when it is due. On a cluster (and on a
single-connection client) it is ``wait_for_jobs`` followed by ``claim``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from redis.commands.core import Script
from redis.exceptions import NoScriptError

from backends.redis import connect
from backends.redis.claimed import decode_claimed
from backends.redis.errors import translate_errors
from backends.redis.scripts import eval_once
from queue_core.model import ClaimedJob

if TYPE_CHECKING:
    from backends.redis.keys import Keys

__all__ = ["MIN_BLOCK_S", "RedisWaitClaim"]

MIN_BLOCK_S = 0.001
"""The shortest ``BLPOP`` sent: Redis counts a timeout in milliseconds and 0 means
forever, so a wait shorter than one just claims (no server rounding to rely on)."""


class RedisWaitClaim:
    """:meth:`wait_and_claim` of :class:`~backends.redis.RedisStorage`."""

    _cluster: bool
    _closed: bool
    _claim: Script
    _next_ready: Script
    keys: Keys

    if TYPE_CHECKING:  # provided by RedisStorage and RedisAttempts

        def _args(self, now: int | None) -> list[Any]: ...
        def _claim_args(
            self,
            worker_id: str,
            queues: Sequence[str],
            limit: int,
            lease_ms: int,
            now: int | None,
        ) -> list[Any]: ...
        def _call(self, script: Script, args: list[Any]) -> Any: ...
        def _wake_client(self) -> Any: ...
        def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool: ...
        def claim(
            self,
            worker_id: str,
            queues: Sequence[str],
            limit: int,
            lease_ms: int,
            *,
            now: int | None = None,
        ) -> list[ClaimedJob]: ...

    def wait_and_claim(
        self, worker_id: str, queues: Sequence[str], limit: int, lease_ms: int, timeout: float
    ) -> list[ClaimedJob]:
        """See :meth:`queue_core.storage.SupportsWaitClaim.wait_and_claim`."""
        if limit <= 0 or not queues or self._closed:
            return []
        client = self._wake_client()
        pool = getattr(client, "connection_pool", None)  # a RedisCluster has none
        if timeout < MIN_BLOCK_S:
            return self.claim(worker_id, queues, limit, lease_ms)
        if self._cluster or pool is None or getattr(client, "connection", None) is not None:
            self.wait_for_jobs(queues, timeout)
            return self.claim(worker_id, queues, limit, lease_ms)
        names = list(dict.fromkeys(queues))
        with translate_errors("wait_and_claim"):
            due_ms = int(self._call(self._next_ready, self._args(None) + names))
        wait = min(timeout, connect.WAKE_MAX_S)
        if due_ms >= 0:
            wait = min(wait, due_ms / 1000.0)
        if wait < MIN_BLOCK_S:
            return self.claim(worker_id, queues, limit, lease_ms)
        args = self._claim_args(worker_id, names, limit, lease_ms, None)
        blpop = ("BLPOP", *[self.keys.wake(q) for q in names], f"{wait:.3f}")
        with translate_errors("wait_and_claim"):
            r = _blpop_then_claim(pool, blpop, self._claim, args)
        return decode_claimed(r)


def _blpop_then_claim(pool: Any, blpop: tuple[Any, ...], script: Any, args: list[Any]) -> Any:
    """Send ``blpop`` and the claim's ``EVALSHA`` together on one pooled connection;
    the claim's reply. Any failure disconnects the connection (a reply may be unread)."""
    conn = pool.get_connection()
    try:
        conn.send_packed_command(conn.pack_commands([blpop, ("EVALSHA", script.sha, 0, *args)]))
        conn.read_response()  # the token, or nil on timeout: the claim follows either way
        try:
            return conn.read_response()
        except NoScriptError:  # the server lost its scripts: load it and claim again
            return eval_once(conn, script, args)
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)
