"""``Task.map`` on a storage with ``SupportsTemplateEnqueue`` (SQLite): the jobs it stores
are those of the ordinary path (``Task._plain`` per element, then ``enqueue``), arguments
are checked first, and header providers and eager mode keep the ordinary path."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import queue_core
from queue_core.app.task import Concurrency
from queue_core.records.errors import SerializationError
from queue_core.records.jobs import JobRecord


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[queue_core.Queue]:
    q = queue_core.Queue(f"sqlite:///{tmp_path / 'q.db'}")
    yield q
    q.close()


def _record(queue: queue_core.Queue, job_id: str) -> JobRecord:
    rec = queue.storage().get_job(job_id)
    assert rec is not None
    return rec


def _anon(rec: JobRecord) -> JobRecord:
    return dataclasses.replace(rec, id="", payload=b"", enqueued_at=0, run_at=0)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"retry_jitter": 0, "max_retries": 3, "priority": 4, "timeout": 5, "queue": "q2"},
        {"heartbeat": 2, "schedule_to_start": 30, "concurrency": Concurrency(limit=2, key="k")},
    ],
)
def test_map_through_the_template_stores_what_the_ordinary_path_stores(
    queue: queue_core.Queue, options: dict[str, Any]
) -> None:
    @queue.task(name="t.body", **options)
    def body(a: Any, b: Any = None) -> None: ...

    assert body._calls.sink() is queue.storage()
    handles = body.map([(1,), ("x", {"k": [1, 2]}), [None, 2.5], 7])
    calls = [(1,), ("x", {"k": [1, 2]}), (None, 2.5), (7,)]
    ordinary = [queue._submit_one(body._plain(a, {}, f"ref{i}")) for i, a in enumerate(calls)]
    for h, ref in zip(handles, ordinary, strict=True):
        got, want = _record(queue, h.id), _record(queue, ref.id)
        assert got.payload == want.payload
        assert _anon(got) == _anon(want)
    assert [h.id for h in handles] == sorted(h.id for h in handles)
    claimed = queue.storage().claim("w", [_record(queue, handles[0].id).queue], 2, 30_000)
    assert [c.id for c in claimed] == [h.id for h in handles[:2]]  # in map order


def test_bad_elements_raise_before_anything_is_written(queue: queue_core.Queue) -> None:
    @queue.task(name="t.one")
    def one(a: int) -> None: ...

    with pytest.raises(TypeError, match="t.one"):
        one.map([(1,), (1, 2)])
    with pytest.raises(SerializationError):
        one.map([(1,), (object(),)])
    assert all(s.ready == 0 and s.scheduled == 0 for s in queue.storage().stats())


def test_header_providers_eager_and_keyed_tasks_keep_the_ordinary_path(
    queue: queue_core.Queue,
) -> None:
    @queue.task(name="t.plain")
    def plain(a: int) -> None: ...

    @queue.task(name="t.unique", unique_key=lambda n: f"u{n}")
    def unique(n: int) -> None: ...

    assert plain._calls.sink() is not None
    assert unique._calls.sink() is None  # a key per call: Task._make
    queue.eager = True
    assert plain._calls.sink() is None
    queue.eager = False
    queue.add_header_provider(lambda: {"trace": "t1"})
    assert plain._calls.sink() is None
    h = plain.map([(5,)])[0]
    assert _record(queue, h.id).options is not None  # the provider's header was stored
    assert queue_core.Queue("memory://").task(name="t.m")(lambda a: a)._calls.sink() is None


def test_delay_through_the_template_stores_what_the_ordinary_path_stores(
    queue: queue_core.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    @queue.task(name="t.d", priority=2, timeout=7, retry_jitter=0)
    def d(a: Any, b: Any = None, *, c: int = 0) -> None: ...

    calls: list[Any] = []
    sink = d._calls.sink()
    assert sink is not None
    real = sink.enqueue_template
    monkeypatch.setattr(sink, "enqueue_template", lambda *a, **k: calls.append(a) or real(*a, **k))
    fast = [d.delay(1), d.delay("x", b=[2]), d.delay(None, c=3)]
    assert len(calls) == 3
    monkeypatch.undo()
    same: list[tuple[Any, dict[str, Any]]] = [((1,), {}), (("x",), {"b": [2]}), ((None,), {"c": 3})]
    slow = [queue._submit_one(d._plain(a, k, f"s{i}")) for i, (a, k) in enumerate(same)]
    for h, ref in zip(fast, slow, strict=True):
        got, want = _record(queue, h.id), _record(queue, ref.id)
        assert got.payload == want.payload and _anon(got) == _anon(want)
    with pytest.raises(TypeError, match="t.d"):
        d.delay(1, 2, 3)
