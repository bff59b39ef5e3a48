"""Claiming on Redis: ``claim``, an idle worker's wait (``SupportsWakeup``) and its wait
and claim in one round trip (``SupportsWaitClaim``).

``claim.lua`` hands out up to ``limit`` ready jobs of the named queues (its header says
the order, the concurrency parking and the rate check). Enqueues, retries and released
concurrency slots push a token to a bounded per-queue list that idle workers ``BLPOP``.

:meth:`RedisClaiming.wait_and_claim` sends the ``BLPOP`` on the queues' wake-up lists and
the claim's ``EVALSHA`` together on one connection of the wake-up client: Redis runs the
queued ``EVALSHA`` as soon as the ``BLPOP`` returns (a token arrived) or times out, so the
claim needs no round trip of its own after the wake-up. The claim runs at the server's
time, after the wait, exactly as a ``claim`` call made then would: a token taken by a
wait whose claim finds nothing strands nothing (the job it announced was claimed by
another worker, and every token is pushed by a script that made a job ready).

Before it blocks it asks ``next_ready`` (read only) how long until a job may be
claimable, as :meth:`RedisClaiming.wait_for_jobs` does: a delayed job falling due pushes
no token, so the wait ends when it is due. On a cluster (and on a single-connection
client) it is ``wait_for_jobs`` followed by ``claim``.
"""

from __future__ import annotations

import heapq
import logging
import os
import select
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from redis.commands.core import Script
from redis.exceptions import NoScriptError

from backends.redis import connect
from backends.redis.claimed import claim_pins, decode_claimed
from backends.redis.errors import translate_errors
from backends.redis.pauses import pause_arg
from backends.redis.scripts import eval_once
from backends.redis.store import RedisStore
from queue_core.records.jobs import AttemptEnd, ClaimedJob

__all__ = ["MIN_BLOCK_S", "RedisClaiming"]

log = logging.getLogger("backends.redis")

MIN_BLOCK_S = 0.001
"""The shortest ``BLPOP`` sent: Redis counts a timeout in milliseconds and 0 means
forever, so a wait shorter than one just claims (no server rounding to rely on)."""


class RedisClaiming:
    """``claim``, ``wait_for_jobs`` and ``wait_and_claim`` of one store."""

    def __init__(
        self,
        store: RedisStore,
        finish: Callable[[Sequence[AttemptEnd]], object],
        claimed: Callable[[str, int | None], None],
    ) -> None:
        self.store = store
        self._finish = finish
        """Ends attempts (``Storage.finish``): a claimed job whose hash does not decode
        is dead-lettered ``corrupt_record`` through it (:func:`decode_claimed`)."""
        self.claimed = claimed
        """A workflow function's claim (``RedisWorkflows.claimed``: ``plan.claim_ops``)."""
        self._claim = store.script("claim")
        self._corrupt: Any = None  # corrupt.lua, registered when first needed
        self._next_ready = store.script("next_ready")
        self._peek: Script | None = None  # peek.lua, registered on first use (cluster only)
        self._interrupts = 0  # calls of interrupt_waits: a wait ends when it changes

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        now: int | None,
        ahead: bool = False,
    ) -> list[ClaimedJob]:
        """``Storage.claim``: one ``claim.lua`` call (on a cluster, one per home);
        ``ahead``: ``SupportsPrefetch.claim_ahead`` (a negative lease for the script)."""
        if limit <= 0 or not queues:
            return []
        if ahead:
            lease_ms = -lease_ms
        if self.store.cluster:
            return self._claim_homes(worker_id, queues, limit, lease_ms, now)
        args = self._claim_args(worker_id, queues, limit, lease_ms, now)
        with translate_errors("claim"):
            r = self.store.run(self._claim, args)
        return self._decoded(r, now)

    def _decoded(
        self, r: list[Any], now: int | None, home: str | None = None, suffix: str = ""
    ) -> list[ClaimedJob]:
        """The jobs of a claim reply (run in ``home``, its tokens given ``suffix``); those
        that do not decode are dead-lettered alone. A workflow function's claim among
        them goes to :attr:`claimed` (inline: no call on the plain path)."""
        jobs, ends, corrupt = decode_claimed(r, suffix)
        if corrupt:
            if self._corrupt is None:
                self._corrupt = self.store.script("corrupt")
            with translate_errors("claim"):
                self.store.call(self._corrupt, self.store.args(None, home) + corrupt)
        if ends:
            self._finish(ends)
        for job in jobs:
            if job.step_id is not None:
                self._step_claimed(job, now)
        return jobs

    def _step_claimed(self, job: ClaimedJob, now: int | None) -> None:
        """A workflow function's claim (step ``main``) goes to :attr:`claimed`."""
        from queue_core.records.workflows import FUNCTION_STEP  # not at a worker's start-up

        if job.step_id == FUNCTION_STEP and job.execution_id is not None:
            self.claimed(job.execution_id, now)

    def _claim_args(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        now: int | None,
        home: str | None = None,
        pauses: str | None = None,
    ) -> list[Any]:
        """The claim script's arguments; a fresh lease token prefix per call; on a
        cluster the pauses last (:func:`~backends.redis.pauses.pause_arg`)."""
        args = self.store.args(now, home)
        args += (worker_id, limit, lease_ms, os.urandom(6).hex() + ".")
        args += dict.fromkeys(queues)
        if pauses is not None:
            args.append(pauses)
        return args

    # ------------------------------------------------------------------ a cluster's homes

    def _claim_in(
        self,
        home: str,
        queues: list[str],
        worker_id: str,
        limit: int,
        lease_ms: int,
        now: int | None,
        pauses: dict[str, str],
    ) -> tuple[list[ClaimedJob], list[str]]:
        """``claim.lua`` in one home; the jobs (their tokens naming the home) and the
        queues newly found to have jobs in the shared home. ``pauses`` caches the pause
        argument of a queue's home for the claim call (read once, on first need)."""
        homes = self.store.homes
        if home == homes.shared:
            arg = "*"
        else:
            if "" not in pauses:
                pauses[""] = pause_arg(self.store, home)
            arg = pauses[""]
        args = self._claim_args(worker_id, queues, limit, lease_ms, now, home, arg)
        with translate_errors("claim"):
            r = self.store.run(self._claim, args)
        new = homes.learn(claim_pins(r))
        return self._decoded(r, now, home, homes.suffix(home, queues[0])), new

    def _claim_homes(
        self, worker_id: str, queues: Sequence[str], limit: int, lease_ms: int, now: int | None
    ) -> list[ClaimedJob]:
        """``claim`` on a cluster (see the module doc)."""
        homes = self.store.homes
        groups = homes.groups(queues)
        pauses: dict[str, str] = {}
        if len(groups) == 1:
            ((home, names),) = groups.items()
            jobs, new = self._claim_in(home, names, worker_id, limit, lease_ms, now, pauses)
            if new and len(jobs) < limit:  # found just now: the shared home's jobs too
                more, _ = self._claim_in(
                    homes.shared, new, worker_id, limit - len(jobs), lease_ms, now, pauses
                )
                jobs += more
            return jobs
        order = self._peek_homes(groups, limit, now)
        rank = {member[16:].decode(): k for k, (_, _, member, _) in enumerate(order)}
        share = Counter(home for *_, home in order[:limit])
        got: dict[str, list[ClaimedJob]] = {}
        n = 0
        full: set[str] = set()
        for home, want in share.items():
            jobs, _ = self._claim_in(home, groups[home], worker_id, want, lease_ms, now, pauses)
            got[home] = jobs
            n += len(jobs)
            if len(jobs) == want:
                full.add(home)
        for home in groups:  # a home short of its share leaves the rest to the others
            if n >= limit:
                break
            if home in full or home not in share:
                more, _ = self._claim_in(
                    home, groups[home], worker_id, limit - n, lease_ms, now, pauses
                )
                got.setdefault(home, []).extend(more)
                n += len(more)
        inf = len(order)
        # merged in claim order; each home's jobs keep the order its claim gave them (a
        # round_robin turn claimed in a group job's place is not where the peek saw it)
        return list(
            heapq.merge(
                *got.values(), key=lambda j: (-j.priority, j.run_at or 0, rank.get(j.id, inf))
            )
        )

    def _peek_homes(
        self, groups: dict[str, list[str]], limit: int, now: int | None
    ) -> list[tuple[int, int, bytes, str]]:
        """``peek.lua`` in each home (the queues' own first, then the shared one, which a
        peek may add); the candidates in claim order: ``(-priority, ready time, member,
        home)``."""
        homes = self.store.homes
        todo = sorted(groups, key=lambda h: h == homes.shared)
        out: list[tuple[int, int, bytes, str]] = []
        while todo:
            home = todo.pop(0)
            args = self.store.args(now, home)
            args.append(limit)
            args += groups[home]
            if self._peek is None:
                self._peek = self.store.script("peek")
            with translate_errors("claim"):
                r = self.store.call(self._peek, args)
            if len(r) % 3:
                for q in homes.learn(r.pop()):
                    shared = groups.setdefault(homes.shared, [])
                    shared.append(q)
                    if homes.shared not in todo and len(shared) == 1:
                        todo.append(homes.shared)
            out += ((-int(r[i]), int(r[i + 1]), r[i + 2], home) for i in range(0, len(r), 3))
        out.sort()
        return out

    def _due_ms(self, names: list[str], home: str | None = None) -> int:
        """``next_ready.lua``: 0 when a job is ready now, else ms until one may be, -1 none."""
        args = self.store.args(None, home) + names
        if self.store.cluster:
            args.append(pause_arg(self.store, home or self.store.homes.shared, "wait_for_jobs"))
        with translate_errors("wait_for_jobs"):
            return int(self.store.call(self._next_ready, args))

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """``SupportsWakeup.wait_for_jobs``: ``True`` at once when a job is ready now;
        otherwise ``BLPOP`` on the queues' wake-up lists until a token arrives, the
        earliest delayed job becomes due, or the timeout. Spurious wake-ups are possible."""
        if self.store.closed or not queues:
            return False
        interrupts = self._interrupts
        groups = self.store.homes.groups(queues)
        dues = [self._due_ms(names, home) for home, names in groups.items()]
        if 0 in dues or self._interrupts != interrupts:
            return True
        due_ms = min((d for d in dues if d > 0), default=-1)
        wait = min(timeout, connect.WAKE_MAX_S, timeout if due_ms < 0 else due_ms / 1000.0)
        if wait <= 0:
            return due_ms >= 0
        keys = self.store.keys
        lists = {home: [keys.wake(q, home) for q in names] for home, names in groups.items()}
        with translate_errors("wait_for_jobs"):
            if len(lists) == 1:
                got = self.store.wake_client().blpop(next(iter(lists.values())), timeout=wait)
            else:
                got = _blpop_any(self.store.wake_client(), list(lists.values()), wait)
        interrupted = self._interrupts != interrupts
        return got is not None or interrupted or (due_ms >= 0 and wait < timeout)

    def interrupt_waits(self) -> None:
        """End the waits in progress (``SupportsWaitInterrupt``): ``CLIENT UNBLOCK`` of
        the wake-up connections (:meth:`RedisStore.unblock_waits`), sent from a thread of
        its own so that the caller never waits for the server; a ``wait_and_claim`` so
        ended claims what is ready, as after a timeout."""
        self._interrupts += 1
        threading.Thread(target=self._unblock, name="queue-core unblock", daemon=True).start()

    def _unblock(self) -> None:
        try:
            self.store.unblock_waits()
        except Exception as exc:  # noqa: BLE001 - the waits then end at their timeout
            log.debug("interrupt_waits: %s", exc)

    def wait_and_claim(
        self, worker_id: str, queues: Sequence[str], limit: int, lease_ms: int, timeout: float
    ) -> list[ClaimedJob]:
        """``SupportsWaitClaim.wait_and_claim`` (see the module doc)."""
        if limit <= 0 or not queues or self.store.closed:
            return []
        interrupts = self._interrupts
        client = self.store.wake_client()
        pool = getattr(client, "connection_pool", None)  # a RedisCluster has none
        if timeout < MIN_BLOCK_S:
            return self.claim(worker_id, queues, limit, lease_ms, None)
        if self.store.cluster or pool is None or getattr(client, "connection", None) is not None:
            self.wait_for_jobs(queues, timeout)
            return self.claim(worker_id, queues, limit, lease_ms, None)
        names = list(dict.fromkeys(queues))
        due_ms = self._due_ms(names)
        wait = min(timeout, connect.WAKE_MAX_S)
        if due_ms >= 0:
            wait = min(wait, due_ms / 1000.0)
        if wait < MIN_BLOCK_S or self._interrupts != interrupts:  # interrupted: no wait
            return self.claim(worker_id, queues, limit, lease_ms, None)
        args = self._claim_args(worker_id, names, limit, lease_ms, None)
        blpop = ("BLPOP", *[self.store.keys.wake(q) for q in names], f"{wait:.3f}")
        with translate_errors("wait_and_claim"):
            r = _blpop_then_claim(pool, blpop, self._claim, args)
        return self._decoded(r, None)


def _blpop_any(client: Any, lists: list[list[str]], wait: float) -> Any:
    """On a cluster: ``BLPOP`` the lists of each home (one slot each) at once, one pooled
    connection of the node owning each; the first reply, or ``None`` when every wait timed
    out. The waits still blocked then are cut by disconnecting (the server unblocks a
    client that leaves), so a token popped in that instant can be lost: a token is only a
    hint, and the claim after any wake-up reads every home."""
    conns: list[tuple[Any, Any]] = []
    done: set[int] = set()
    got = None
    try:
        for keys in lists:
            pool = client.get_redis_connection(client.get_node_from_key(keys[0])).connection_pool
            conn = pool.get_connection()
            conns.append((pool, conn))
            conn.send_command("BLPOP", *keys, f"{wait:.3f}")
        socks = {conn._sock.fileno(): k for k, (_, conn) in enumerate(conns)}
        poller = select.poll()  # not select(): this process may hold descriptors past 1024
        for fd in socks:
            poller.register(fd, select.POLLIN)
        for fd, _ in poller.poll((wait + 1.0) * 1000.0):
            k = socks[fd]
            reply = conns[k][1].read_response()
            done.add(k)
            got = got if reply is None else reply
    finally:
        for k, (pool, conn) in enumerate(conns):
            if k not in done:
                conn.disconnect()
            pool.release(conn)
    return got


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
