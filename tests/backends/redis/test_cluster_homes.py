"""Redis Cluster homes (SPEC §8): the keys of each queue share the queue's hash tag, so the
queues spread over the masters, while every Lua script still touches one slot -- checked
on the servers themselves: ``MONITOR`` on every master records each script's commands and
``COMMAND GETKEYS`` names their keys."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis.cluster import RedisCluster

from backends.redis import RedisStorage
from backends.redis.scripts import SCRIPTS
from queue_core.records.control import PauseKind, ProgressUpdate
from queue_core.records.jobs import NewJob
from queue_core.records.workflows import Suspension
from queue_core.testing.fixtures import (
    LEASE,
    T0,
    complete_end,
    dead_end,
    new_job,
    retry_end,
)
from queue_core.testing.suite._durable_base import (
    claim_function,
    event_wait,
    make_workflow,
    suspended,
)
from queue_core.testing.suite._flows_base import make_execution, make_spec
from tests.servers.redis_cluster import RedisClusterServers

SEC = 1000


@pytest.fixture
def raw(redis_cluster: RedisClusterServers) -> Iterator[RedisCluster[bytes]]:
    node = redis_cluster.nodes[0]
    client: RedisCluster[bytes] = RedisCluster(host=node.host, port=node.port)
    try:
        yield client
    finally:
        client.close()


def _queues_on_two_masters(raw: RedisCluster[bytes], prefix: str) -> tuple[str, str]:
    """Two queue names whose homes ``{prefix:queue}`` are owned by different masters."""
    first = "qa"
    owner = raw.get_node_from_key(f"{{{prefix}:{first}}}")
    for i in range(100):
        other = f"qb{i}"
        if raw.get_node_from_key(f"{{{prefix}:{other}}}") != owner:
            return first, other
    raise AssertionError("no two queues on different masters")


def _all_keys(raw: RedisCluster[bytes], prefix: str) -> list[bytes]:
    found: list[bytes] = []
    for node in raw.get_primaries():
        found += raw.keys(f"*{prefix}*", target_nodes=node)
    return found


def test_the_keys_of_two_queues_land_in_different_slots(
    redis_cluster: RedisClusterServers, raw: RedisCluster[bytes]
) -> None:
    prefix = f"h{uuid.uuid4().hex[:10]}"
    a, b = _queues_on_two_masters(raw, prefix)
    s = RedisStorage.from_url(redis_cluster.url(prefix=prefix))
    try:
        s.enqueue([new_job(queue=a), new_job(queue=a)], now=T0)
        s.enqueue([new_job(queue=b)], now=T0)
        for q in (a, b):
            (got,) = s.claim("w", [q], 1, LEASE, now=T0)
            assert s.finish([complete_end(got.ref)], now=T0 + 1) == [True]
        slot_a, slot_b = raw.keyslot(f"{{{prefix}:{a}}}"), raw.keyslot(f"{{{prefix}:{b}}}")
        assert slot_a != slot_b
        by_home: dict[int, set[bytes]] = {}
        for key in _all_keys(raw, prefix):
            by_home.setdefault(raw.keyslot(key), set()).add(key)
        home_a = {
            k for k in by_home.get(slot_a, set()) if k.startswith(f"{{{prefix}:{a}}}:".encode())
        }
        home_b = {
            k for k in by_home.get(slot_b, set()) if k.startswith(f"{{{prefix}:{b}}}:".encode())
        }
        # each queue's jobs, attempts, ready set, counts, running set... in its own slot
        assert f"{{{prefix}:{a}}}:n:{a}".encode() in home_a
        assert f"{{{prefix}:{b}}}:n:{b}".encode() in home_b
        assert len([k for k in home_a if b":j:" in k]) == 2
        assert len([k for k in home_b if b":j:" in k]) == 1
        job_keys = [k for k in _all_keys(raw, prefix) if b":j:" in k]
        assert {raw.keyslot(k) for k in job_keys} == {slot_a, slot_b}
    finally:
        s.close()


# ---------------------------------------------------------------------- MONITOR


class _Monitor:
    """``MONITOR`` on one node, its output kept until :meth:`stop`."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.sendall(b"MONITOR\r\n")
        self.buf = bytearray()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        self.ready.wait(5)

    def _read(self) -> None:
        while True:
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError:
                return
            if not chunk:
                return
            self.buf += chunk
            if self.buf.startswith(b"+OK"):
                self.ready.set()

    def stop(self) -> list[list[bytes]]:
        """The commands seen, each ``[b'lua' | b'client', cmd, args...]``."""
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(5)
        out = []
        for line in bytes(self.buf).split(b"\r\n"):
            if not line.startswith(b"+") or b"] " not in line:
                continue
            head, _, rest = line.partition(b"] ")
            out.append([b"lua" if head.endswith(b"lua") else b"client", *_unquote(rest)])
        return out


def _unquote(text: bytes) -> list[bytes]:
    """The arguments of one MONITOR line: C-escaped strings in double quotes."""
    args: list[bytes] = []
    i = 0
    escapes = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("a"): b"\a", ord("b"): b"\b"}
    while i < len(text):
        if text[i] != ord('"'):
            i += 1
            continue
        i += 1
        cur = bytearray()
        while text[i] != ord('"'):
            c = text[i]
            if c == ord("\\"):
                nxt = text[i + 1]
                if nxt == ord("x"):
                    cur.append(int(text[i + 2 : i + 4], 16))
                    i += 4
                    continue
                cur += escapes.get(nxt, bytes([nxt]))
                i += 2
                continue
            cur.append(c)
            i += 1
        args.append(bytes(cur))
        i += 1
    return args


def _keys_of(raw: RedisCluster[bytes], node: Any, cmd: list[bytes]) -> list[bytes]:
    """The key arguments of ``cmd``, as the server that ran it names them."""
    conn = raw.get_redis_connection(node).connection_pool.get_connection()
    try:
        conn.send_command("COMMAND", "GETKEYS", *cmd)
        try:
            return list(conn.read_response())
        except Exception:  # noqa: BLE001 - "the command has no key arguments" (TIME, ...)
            return []
    finally:
        raw.get_redis_connection(node).connection_pool.release(conn)


def _workflow(s: RedisStorage) -> None:
    """A workflow through a suspension, an event and a second claim."""
    wf = make_workflow()
    s.start_execution(wf, now=T0 + 11)
    fn = claim_function(s, wf.id, T0 + 12)
    assert fn is not None
    wait = Suspension(ready_at=None, wait=event_wait(1, "go", since=T0 + 12), reason="event")
    assert s.finish([suspended(fn.ref, wait)], now=T0 + 13) == [True]  # flow_apply, guarded
    assert s.send_event("go", None, b"1", now=T0 + 14) == 1  # flow_send
    fn = claim_function(s, wf.id, T0 + 15)  # claim, then the waiting workflow runs again
    assert fn is not None
    s.finish([complete_end(fn.ref)], now=T0 + 16)


def _workload(s: RedisStorage, a: str, b: str) -> None:
    """Every script of the backend, on two queues and the shared home."""
    s.enqueue([new_job(queue=a)], now=T0)  # enqueue_one
    s.enqueue([new_job(queue=a), new_job(queue=b), new_job(queue=b)], now=T0)  # enqueue_plain
    s.enqueue([new_job(queue=a, options='{"o":1}')], now=T0)  # enqueue
    s.enqueue(
        [
            new_job(queue=b, concurrency_key="k", concurrency_limit=1),
            new_job(queue=b, rate_key="r", rate_limit=5, rate_window_ms=SEC),
        ],
        now=T0,
    )
    s.enqueue_unique([new_job(queue=a, unique_key="u")], now=T0)
    poison = NewJob(id=uuid.uuid4().hex, task_name="t", queue=a, payload=b"[]")
    s.enqueue([poison], now=T0)
    (home,) = s.store.homes.find([poison.id])
    s.store.client.hset(s.keys.job(poison.id, home), "ma", "banana")  # corrupt.lua, in a's home
    s.wait_for_jobs([a, b], 0.01)  # next_ready
    got = s.claim("w", [a, b], 20, LEASE, now=T0 + 1)  # peek + claim in three homes
    assert len(got) >= 7
    s.renew([g.ref for g in got], LEASE, now=T0 + 2)
    s.start_claimed([g.ref for g in got], now=T0 + 2)  # start, in three homes
    s.heartbeat(got[0].ref, now=T0 + 2)
    own = [g for g in got if g.queue == a and "@" in g.lease_token]  # a's own home
    assert len(own) == 3
    ends = [complete_end(own[0].ref), dead_end(own[1].ref), dead_end(own[2].ref)]
    ends += [retry_end(g.ref, delay_ms=0) for g in got if g.queue == b][:1]
    s.finish(ends, now=T0 + 3)
    s.reap(now=T0 + 3 + LEASE + 5 * SEC)  # the rest lost their lease
    victim = NewJob(id=uuid.uuid4().hex, task_name="t", queue=a, payload=b"[]")
    s.enqueue([victim], now=T0)
    s.cancel(victim.id, now=T0 + 4)
    dead = {d.job_id: d for d in s.list_dead(limit=10)}
    assert dead[poison.id].reason == "corrupt_record"
    s.retry_dead(dead[own[1].id].id, now=T0 + 5)  # retry_dead, in a's home
    s.retry_dead(dead[own[2].id].id, b, now=T0 + 5)  # dead_take + dead_drop: to b's home
    s.purge_dead(before=T0 + 10 * LEASE)
    s.stats(now=T0 + 6)
    s.count_pending([a, b], 0, now=T0 + 6)
    s.list_jobs(limit=5)
    s.get_job(victim.id)
    new = make_execution(make_spec({"x": [], "y": ["x"]}), queue=a)
    s.start_execution(new, now=T0 + 7)  # flow_start
    (step,) = [g for g in s.claim("w", [a], 50, LEASE, now=T0 + 8) if g.step_id == "x"]
    s.finish([complete_end(step.ref)], now=T0 + 9)  # finish + flow_apply
    s.enqueue_tick("sched", T0, new_job(queue=b), now=T0 + 10)  # schedule_tick + enqueue
    s.throughput(T0, now=T0 + 10)
    _workflow(s)
    _flow_control(s, a, b)
    s.prune(now=T0 + 10 * 86_400_000)  # prune


def _flow_control(s: RedisStorage, a: str, b: str) -> None:
    """The flow-control scripts: pauses read in a queue's home and the shared one, a job
    held in a's home, a resume sweeping every home, progress in a's home, debounce,
    supersede and round_robin keys in the shared home."""
    t = T0 + 20 * SEC
    s.pause(PauseKind.QUEUE, b, now=t)
    s.pause(PauseKind.TASK, "t.held", now=t)
    s.enqueue([new_job(queue=a, task_name="t.held"), new_job(queue=a)], now=t)
    s.enqueue_debounced(
        [new_job(queue=a, debounce_key="d", debounce_ms=SEC, debounce_max_ms=5 * SEC)], now=t
    )
    s.enqueue_superseding(
        [new_job(queue=b, concurrency_key="s", concurrency_behavior="latest")], now=t
    )
    rr = dict(concurrency_limit=5, concurrency_behavior="round_robin", concurrency_group="g")
    s.enqueue([new_job(queue=a, concurrency_key=f"g:{k}", **rr) for k in "xy"], now=t)  # type: ignore[arg-type]
    s.wait_for_jobs([a, b], 0.01)
    s.count_pending([a, b], 0, now=t + 1)
    got = s.claim("w", [a, b], 20, LEASE, now=t + 10 * SEC)  # claim in a's home holds one
    assert "t.held" not in {g.task_name for g in got}
    assert b not in {g.queue for g in got}
    own = [g for g in got if g.queue == a and "@" in g.lease_token]
    assert s.set_progress(own[0].ref, ProgressUpdate(fraction=0.5), now=t + 11 * SEC)
    assert s.get_progress(own[0].id) is not None
    s.round_robin_keys("g", now=t + 11 * SEC)  # rr_keys
    assert s.resume(PauseKind.TASK, "t.held")  # resume in the shared home, then a's and b's
    assert s.resume(PauseKind.QUEUE, b)
    back = s.claim("w", [a, b], 20, LEASE, now=t + 12 * SEC)
    assert "t.held" in {g.task_name for g in back}


def test_every_script_touches_one_slot(
    redis_cluster: RedisClusterServers, raw: RedisCluster[bytes]
) -> None:
    prefix = f"m{uuid.uuid4().hex[:10]}"
    a, b = _queues_on_two_masters(raw, prefix)
    s = RedisStorage.from_url(redis_cluster.url(prefix=prefix, retention="1d"))
    nodes = {(n.host, n.port): n for n in raw.get_primaries()}
    monitors = {addr: _Monitor(*addr) for addr in nodes}
    try:
        _workload(s, a, b)
    finally:
        seen = {addr: m.stop() for addr, m in monitors.items()}
    names = {script.sha: name for name, script in s.store._scripts.items()}
    names[s.schedules._tick.sha] = "schedule_tick"
    s.close()
    ran: set[str] = set()
    for addr, lines in seen.items():
        current: str | None = None
        slots: set[int] = set()
        for line in [*lines, [b"client", b"END"]]:
            if line[0] == b"client":
                if current is not None:
                    assert len(slots) <= 1, f"{current} touched slots {slots} on {addr}"
                sha = line[2].decode() if line[1].upper() == b"EVALSHA" else None
                current = names.get(sha) if sha else None
                if current is not None:
                    ran.add(current)
                slots = set()
            elif current is not None:
                keys = _keys_of(raw, nodes[addr], line[1:])
                slots |= {raw.keyslot(k) for k in keys}
    expected = {*SCRIPTS, "enqueue_plain", "enqueue_one", "schedule_tick"}
    expected |= {"progress", "resume", "rr_keys"}
    assert expected <= ran, f"not exercised: {sorted(expected - ran)}"
