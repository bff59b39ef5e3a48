"""Contract: the worker registry (``SupportsWorkerRegistry``) and the cancel poll
(``SupportsCancelPoll``), see :mod:`queue_core.records.workers`.

Each test skips naming the ability on a storage without it. Times are explicit.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from queue_core.records.workers import WorkerInfo
from queue_core.storage.abilities import SupportsCancelPoll, SupportsWorkerRegistry
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    LEASE,
    SEC,
    T0,
    claim_one,
    complete_end,
    enqueue_one,
    new_id,
)
from queue_core.testing.suite._base import ContractBase, lacks
from queue_core.testing.suite._flows_base import claim_steps, flows_of, make_execution, make_spec

__all__ = ["WorkerContract"]

TTL = 15 * SEC


def registry_of(storage: Storage) -> SupportsWorkerRegistry:
    """The storage as :class:`SupportsWorkerRegistry`; the test skips without it."""
    if not isinstance(storage, SupportsWorkerRegistry):
        pytest.skip(lacks(SupportsWorkerRegistry))
    return storage


def poll_of(storage: Storage) -> SupportsCancelPoll:
    """The storage as :class:`SupportsCancelPoll`; the test skips without it."""
    if not isinstance(storage, SupportsCancelPoll):
        pytest.skip(lacks(SupportsCancelPoll))
    return storage


def worker_info(
    host: str = "host-a", pid: int = 100, *, seen: int = T0, **kw: object
) -> WorkerInfo:
    """A worker record last seen at ``seen`` with a 15 s ttl."""
    fields: dict[str, object] = {
        "id": f"{host}:{pid}:{new_id()[:8]}",
        "host": host,
        "pid": pid,
        "queues": ("default", "mail"),
        "slots": 8,
        "busy": 0,
        "stuck": 0,
        "started_at": seen,
        "last_seen": seen,
        "ttl_ms": TTL,
    }
    fields.update(kw)
    return WorkerInfo(**fields)  # type: ignore[arg-type]


class WorkerContract(ContractBase):
    """Workers visible from outside, and cancel requests read in one batch."""

    def test_a_registered_worker_is_listed_with_every_field(self, storage: Storage) -> None:
        reg = registry_of(storage)
        info = worker_info(busy=3, stuck=1)
        reg.register_worker(info)
        assert reg.list_workers(now=T0 + SEC) == [info]

    def test_refresh_replaces_the_record(self, storage: Storage) -> None:
        reg = registry_of(storage)
        info = worker_info()
        reg.register_worker(info)
        later = info.seen_at(T0 + 10 * SEC, busy=5, stuck=2)
        reg.register_worker(later)
        assert reg.list_workers(now=T0 + 20 * SEC) == [later]

    def test_a_worker_drops_out_once_its_ttl_has_passed(self, storage: Storage) -> None:
        reg = registry_of(storage)
        old, fresh = worker_info("host-a"), worker_info("host-b", seen=T0 + 10 * SEC)
        reg.register_worker(old)
        reg.register_worker(fresh)
        assert reg.list_workers(now=T0 + TTL - 1) == [old, fresh]
        assert reg.list_workers(now=T0 + TTL) == [fresh]
        assert reg.list_workers(now=T0 + 10 * SEC + TTL) == []

    def test_workers_are_listed_by_host_then_pid(self, storage: Storage) -> None:
        reg = registry_of(storage)
        infos = [worker_info("b", 1), worker_info("a", 20), worker_info("a", 3)]
        for info in infos:
            reg.register_worker(info)
        assert reg.list_workers(now=T0) == [infos[2], infos[1], infos[0]]

    def test_deregister_removes_only_that_worker(self, storage: Storage) -> None:
        reg = registry_of(storage)
        one, two = worker_info("a"), worker_info("b")
        reg.register_worker(one)
        reg.register_worker(two)
        reg.deregister_worker(one.id)
        reg.deregister_worker("never-registered")
        assert reg.list_workers(now=T0 + SEC) == [two]

    def test_a_record_keeps_its_own_ttl(self, storage: Storage) -> None:
        reg = registry_of(storage)
        short = replace(worker_info("a"), ttl_ms=2 * SEC)
        reg.register_worker(short)
        reg.register_worker(worker_info("b"))
        assert [w.host for w in reg.list_workers(now=T0 + 2 * SEC)] == ["b"]

    def test_cancel_poll_lists_running_attempts_with_a_request(self, storage: Storage) -> None:
        poll = poll_of(storage)
        asked, other = enqueue_one(storage), enqueue_one(storage)
        got = {c.id: c for c in storage.claim("w", ["default"], 5, LEASE, now=T0 + 1)}
        refs = [got[other].ref, got[asked].ref]
        assert poll.cancel_requested(refs) == []
        storage.cancel(asked, now=T0 + 3)
        assert poll.cancel_requested(refs) == [got[asked].ref]
        assert poll.cancel_requested([]) == []

    def test_cancel_poll_leaves_out_refs_no_longer_current(self, storage: Storage) -> None:
        poll = poll_of(storage)
        job_id = enqueue_one(storage)
        got = claim_one(storage, now=T0 + 1)
        storage.cancel(job_id, now=T0 + 2)
        stale = replace(got.ref, lease_token="not-the-token")
        assert poll.cancel_requested([stale, got.ref]) == [got.ref]
        storage.finish([complete_end(got.ref)], now=T0 + 3)
        assert poll.cancel_requested([got.ref]) == []
        assert storage.renew([got.ref], LEASE, now=T0 + 4).lost == [got.ref]

    def test_cancel_poll_sees_a_cancelled_flow_execution(self, storage: Storage) -> None:
        poll = poll_of(storage)
        flows = flows_of(storage)
        new = make_execution(make_spec({"a": [], "b": []}))
        flows.start_execution(new, now=T0)
        running = claim_steps(storage, T0 + 1)
        refs = [running["a"].ref, running["b"].ref]
        assert poll.cancel_requested(refs) == []
        flows.cancel_execution(new.id, now=T0 + 2)
        assert poll.cancel_requested(refs) == refs
