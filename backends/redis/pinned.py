"""The hot scripts' call: one pooled connection pinned to each calling thread.

:meth:`RedisStore.run <backends.redis.store.RedisStore.run>` sends its
``EVALSHA`` (:func:`~backends.redis.scripts.eval_once`) on a connection the calling
thread checked out of the client's pool once and keeps: the per-call checkout and release
cost about a quarter of a single enqueue's client time. The connection goes back to the
pool (disconnected) when a call fails; a forked child checks out its own (the parent's
socket is not the child's to use), noticed by a fork counter instead of a ``getpid()``
system call per call. redis-py's retry policy is kept: a call that fails is replayed
through the connection's ``Retry`` (disconnecting between tries), which then decides, as
``Retry.call_with_retry`` always did, whether to try again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from backends.redis.scripts import eval_once

__all__ = ["Pinned", "command_pinned", "run_pinned"]

_forks = [0]


def _forked() -> None:
    _forks[0] += 1


os.register_at_fork(after_in_child=_forked)


class Pinned(threading.local):
    """Per thread: the pinned connection and the fork count it was checked out at."""

    conn: Any = None
    forks = -1


def command_pinned(local: Pinned, pool: Any, cmd: Sequence[Any]) -> Any:
    """Send one command on this thread's pinned connection of ``pool`` and read its
    reply (no retry: a failure drops the connection and propagates)."""
    conn = local.conn
    if conn is None or local.forks != _forks[0]:
        conn = pool.get_connection()
        local.conn, local.forks = conn, _forks[0]
    try:
        conn.send_command(*cmd)
        return conn.read_response()
    except BaseException:
        local.conn = None
        conn.disconnect()
        pool.release(conn)
        raise


def run_pinned(
    local: Pinned, pool: Any, script: Any, args: Sequence[Any], keys: Sequence[str] = ()
) -> Any:
    """Run ``script`` with ``args`` (and ``keys``) on this thread's pinned connection of
    ``pool``."""
    conn = local.conn
    if conn is None or local.forks != _forks[0]:
        conn = pool.get_connection()
        local.conn, local.forks = conn, _forks[0]
    try:
        try:
            result = eval_once(conn, script, args, keys)
        except Exception as exc:  # noqa: BLE001 - replayed through the retry policy
            result = _retried(conn, script, args, exc, keys)
    except BaseException:
        local.conn = None
        conn.disconnect()
        pool.release(conn)
        raise
    if conn.should_reconnect():
        conn.disconnect()
    return result


def _retried(
    conn: Any, script: Any, args: Sequence[Any], first: Exception, keys: Sequence[str] = ()
) -> Any:
    """What ``conn.retry.call_with_retry`` makes of a call whose first try raised
    ``first``: its first ``do()`` raises ``first`` again, so the policy sees the same
    failures, counts and backoffs as if it had made that try itself (an error it does not
    retry propagates unchanged)."""
    pending = [first]

    def do() -> Any:
        if pending:
            raise pending.pop()
        return eval_once(conn, script, args, keys)

    return conn.retry.call_with_retry(do, lambda _err: conn.disconnect())
