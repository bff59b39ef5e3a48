"""Flow control on the facade (SPEC §13), on memory:// with in-process workers.

Each behaviour through the public API: ``Concurrency`` behaviours, ``RateLimit`` and
``queue.rate_limit``, debounce, ``pause``/``resume``, ``ctx.progress`` and
``JobHandle.progress()``; and the refusals (``ConfigError``) of bad values and of a
storage without the ability.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from backends.memory import MemoryStorage
from queue_core import (
    Concurrency,
    ConfigError,
    JobContext,
    JobSkipped,
    JobState,
    PauseKind,
    Progress,
    Queue,
    RateLimit,
)
from queue_core.records.jobs import Outcome
from queue_core.storage.protocol import Storage
from queue_core.testing.clock import ManualClock

SEC = 1000


def _burst(queue: Queue, slots: int = 1) -> None:
    queue.run_worker(burst=True, slots=slots, install_signal_handlers=False)


# --------------------------------------------------------------------------- concurrency


def test_every_behavior_is_accepted_and_a_bad_one_names_them_all() -> None:
    for behavior in ("queue", "skip", "round_robin", "cancel_in_progress", "latest"):
        assert Concurrency(1, behavior=behavior).behavior == behavior  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as err:
        Concurrency(1, behavior="fair")  # type: ignore[arg-type]
    assert err.value.code == "invalid_option"
    for name in ("'round_robin'", "'cancel_in_progress'", "'latest'", "'fair'"):
        assert name in str(err.value)


def test_round_robin_runs_a_late_tenant_within_one_round_of_a_backlog() -> None:
    queue = Queue("memory://")
    ran: list[str] = []

    @queue.task(concurrency=Concurrency(100, behavior="round_robin", key=lambda t, *_: t))
    def work(tenant: str, i: int) -> None:
        ran.append(tenant)

    work.map([("a", i) for i in range(20)])
    work.delay("b", 0)
    work.delay("c", 0)
    _burst(queue)
    assert ran[:4] == ["a", "b", "c", "a"], ran
    assert sorted(ran) == ["a"] * 20 + ["b", "c"]


def test_without_round_robin_the_backlog_runs_first() -> None:
    queue = Queue("memory://")
    ran: list[str] = []

    @queue.task(concurrency=Concurrency(100, key=lambda t, *_: t))
    def work(tenant: str, i: int) -> None:
        ran.append(tenant)

    work.map([("a", i) for i in range(20)])
    work.delay("b", 0)
    _burst(queue)
    assert ran.index("b") == 20


def test_cancel_in_progress_cancels_the_running_job_and_runs_the_new_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="queue_core.worker")
    queue = Queue("memory://", lease=1.5)
    started = threading.Event()

    @queue.task(concurrency=Concurrency(1, behavior="cancel_in_progress", key=lambda d, v: d))
    def build(doc: str, version: int, *, ctx: JobContext = JobContext.INJECTED) -> int:
        started.set()
        while version == 1 and not ctx.cancelled:  # the old build runs until told to stop
            threading.Event().wait(0.01)
        return version

    worker = threading.Thread(target=_burst, args=(queue, 2), daemon=True)
    old = build.delay("doc", 1)
    worker.start()
    assert started.wait(10)
    new = build.delay("doc", 2)
    assert new.result(timeout=20) == 2
    info = old.info()
    assert (info.state, info.reason) == (JobState.CANCELLED, "superseded")
    (attempt,) = old.attempts()
    assert (attempt.outcome, attempt.reason) == (Outcome.CANCELLED, "superseded")
    worker.join(20)
    # the old worker learns it at its renewal, and says why: asked for, so not a warning
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "lease of job" in r.getMessage()]
    assert said == [
        (logging.INFO, f"lease of job {old.id} attempt 1 lost: the attempt ended cancelled, "
         "reason superseded")
    ]  # fmt: skip


def test_latest_keeps_the_newest_queued_call_and_skips_the_one_it_replaced() -> None:
    queue = Queue("memory://")

    @queue.task(concurrency=Concurrency(1, behavior="latest", key=lambda d, v: str(d)))
    def sync(doc_id: int, version: int) -> int:
        return version

    first, second, third = (sync.delay(1, v) for v in (1, 2, 3))
    other = sync.delay(2, 1)
    _burst(queue)
    for replaced in (first, second):
        with pytest.raises(JobSkipped):
            replaced.result(timeout=1)
        assert replaced.info().reason == "superseded"
    assert third.result(timeout=1) == 3 and other.result(timeout=1) == 1


# --------------------------------------------------------------------------- rate limits


def test_a_named_rate_limit_is_shared_by_every_task_given_it() -> None:
    queue = Queue("memory://")
    partner = queue.rate_limit("partner-api", "2/m")
    assert queue.rate_limit("partner-api", "2/m") is partner
    with pytest.raises(ConfigError, match="partner-api"):
        queue.rate_limit("partner-api", "3/m")

    @queue.task(rate_limit=partner)
    def one(i: int) -> None: ...

    @queue.task(rate_limit=partner)
    def two(i: int) -> None: ...

    for i in range(3):
        one.delay(i)
        two.delay(i)
    claimed = queue.storage().claim("w", ["default"], 10, 30 * SEC)
    assert len(claimed) == 2, "two tasks share one limit of 2 per minute"


def test_a_keyed_rate_limit_holds_per_key_value() -> None:
    queue = Queue("memory://")

    @queue.task(rate_limit=RateLimit("1/m", key=lambda tenant, *_: tenant))
    def call(tenant: str, i: int) -> None: ...

    for i in range(2):
        call.delay("a", i)
        call.delay("b", i)
    claimed = queue.storage().claim("w", ["default"], 10, 30 * SEC)
    assert len(claimed) == 2  # one per tenant
    with pytest.raises(ConfigError) as err:
        RateLimit("1/m", key="tenant")  # type: ignore[arg-type]
    assert err.value.code == "invalid_option"
    with pytest.raises(ConfigError) as bad:
        RateLimit("ten/s")
    assert bad.value.code == "invalid_rate_limit"


def test_a_rate_key_function_must_return_a_string() -> None:
    queue = Queue("memory://")

    @queue.task(rate_limit=RateLimit("1/s", key=lambda n: n))  # type: ignore[arg-type,return-value]
    def call(n: int) -> None: ...

    with pytest.raises(ConfigError, match="rate_limit.key"):
        call.delay(3)
    assert queue.stats() == []


# --------------------------------------------------------------------------- debounce


def _clocked() -> tuple[Queue, ManualClock]:
    clock = ManualClock()
    return Queue(storage=MemoryStorage(clock=clock.now_ms), clock=clock), clock


def test_debounce_merges_calls_last_wins_and_never_past_debounce_max() -> None:
    queue, clock = _clocked()

    @queue.task(debounce="30s", debounce_max="1m", debounce_key=lambda doc_id, *_: str(doc_id))
    def build(doc_id: int, text: str) -> str:
        return text

    first = build.delay(1, "a")
    start = clock.now_ms()
    clock.advance(20)
    assert build.delay(1, "b") == first
    assert build.delay(2, "x") != first
    record = queue.storage().get_job(first.id)
    assert record is not None and record.run_at == start + 50 * SEC
    clock.advance(20)
    build.delay(1, "c")
    record = queue.storage().get_job(first.id)
    assert record is not None and record.run_at == start + 60 * SEC  # debounce_max
    clock.advance(20)
    _burst(queue)
    assert first.result(timeout=1) == "c"
    assert build.delay(1, "d") != first  # the burst is over: a new job


def test_debounce_options_are_checked() -> None:
    queue = Queue("memory://")
    with pytest.raises(ConfigError) as err:
        queue.task(debounce="10s", debounce_max="5s")
    assert err.value.code == "invalid_option"
    with pytest.raises(ConfigError) as conflict:
        queue.task(debounce_max="5s")
    assert conflict.value.code == "conflicting_options"
    with pytest.raises(ConfigError) as both:
        queue.task(debounce="5s", unique_key="k")
    assert both.value.code == "conflicting_options"
    with pytest.raises(ConfigError) as dur:
        queue.task(debounce="soon")
    assert dur.value.code == "invalid_duration"

    with pytest.raises(ConfigError) as mixed:  # at decoration

        @queue.task(debounce="5s", concurrency=Concurrency(1, behavior="latest"))
        def f() -> None: ...

    assert mixed.value.code == "conflicting_options"

    @queue.task(debounce="5s")
    def g() -> None: ...

    with pytest.raises(ConfigError) as delay:
        g.apply(delay=3)
    assert delay.value.code == "conflicting_options"


def test_a_call_cannot_mix_debounce_and_unique_key_with_its_task_and_stores_nothing() -> None:
    queue = Queue("memory://")

    @queue.task(debounce="30s")
    def debounced(x: int) -> None: ...

    @queue.task(unique_key="k")
    def unique(x: int) -> None: ...

    with pytest.raises(ConfigError) as key:
        debounced.apply(args=(1,), unique_key="u")
    assert key.value.code == "conflicting_options" and key.value.field == "debounce"
    with pytest.raises(ConfigError) as bounce:
        unique.apply(args=(1,), debounce="5s")
    assert bounce.value.code == "conflicting_options"
    assert queue.storage().stats() == []  # nothing was stored
    debounced.apply(args=(1,), unique_key=None)  # no key: a plain debounced call
    unique.apply(args=(1,), debounce=None)


# --------------------------------------------------------------------------- pause


def test_a_paused_queue_is_not_claimed_until_resumed_and_producers_go_on() -> None:
    queue = Queue("memory://")
    ran: list[str] = []

    @queue.task(queue="emails")
    def send(i: int) -> None:
        ran.append(f"send{i}")

    @queue.task
    def other() -> None:
        ran.append("other")

    paused = queue.pause(queue="emails")
    assert [(p.kind, p.name) for p in paused] == [(PauseKind.QUEUE, "emails")]
    held = send.delay(1)
    other.delay()
    queue.run_worker(queues=["emails", "default"], burst=True, install_signal_handlers=False)
    assert ran == ["other"] and held.status() is JobState.QUEUED
    assert queue.resume(queue="emails") == []
    queue.run_worker(queues=["emails", "default"], burst=True, install_signal_handlers=False)
    assert ran == ["other", "send1"]


def test_pause_by_task_and_flow_objects_and_bad_calls() -> None:
    queue = Queue("memory://")

    @queue.task
    def t() -> None: ...

    flow = queue.flow("nightly")
    got = queue.pause(task=t, flow=flow)
    assert {(p.kind, p.name) for p in got} == {
        (PauseKind.TASK, t.name),
        (PauseKind.FLOW, "nightly"),
    }
    with pytest.raises(ConfigError) as err:
        queue.pause()
    assert err.value.code == "invalid_option"
    with pytest.raises(ConfigError):
        queue.pause(queue="")


class _Plain:
    """A storage with no flow-control ability: delegates the protocol to memory://."""

    def __init__(self) -> None:
        self._inner = MemoryStorage()

    def __getattr__(self, name: str) -> Any:
        if name in {
            "pause", "round_robin_keys", "enqueue_superseding", "enqueue_debounced",
            "set_progress", "get_progress", "resume", "list_paused",
        }:  # fmt: skip
            raise AttributeError(name)
        return getattr(self._inner, name)


@pytest.mark.parametrize(
    ("options", "ability"),
    [
        ({"concurrency": Concurrency(1, behavior="round_robin")}, "SupportsRoundRobin"),
        ({"concurrency": Concurrency(1, behavior="cancel_in_progress")}, "SupportsSupersede"),
        ({"concurrency": Concurrency(1, behavior="latest")}, "SupportsSupersede"),
        ({"debounce": "1s"}, "SupportsDebounce"),
    ],
)
def test_a_storage_without_the_ability_is_refused_before_anything_is_written(
    options: dict[str, Any], ability: str
) -> None:
    storage: Storage = _Plain()  # type: ignore[assignment]
    queue = Queue(storage=storage)

    @queue.task(**options)
    def f() -> None: ...

    with pytest.raises(ConfigError) as err:
        f.delay()
    assert err.value.code == "invalid_option" and ability in str(err.value)
    assert storage.stats() == []
    with pytest.raises(ConfigError, match="SupportsPause"):
        queue.pause(queue="q")
    assert queue.paused() == []


# --------------------------------------------------------------------------- progress


def test_progress_is_stored_and_the_latest_goes_with_the_end() -> None:
    queue = Queue("memory://")

    @queue.task
    def copy(ctx: JobContext = JobContext.INJECTED) -> None:
        ctx.progress(0.4, "40 of 100 files")
        ctx.progress(0.9, "90 of 100 files")

    handle = copy.delay()
    assert handle.progress() is None
    _burst(queue)
    got = handle.progress()
    assert isinstance(got, Progress)
    assert (got.fraction, got.message) == (0.9, "90 of 100 files")
    assert got.to_dict()["fraction"] == 0.9


def test_ctx_progress_checks_its_arguments_and_tells_the_test_callback() -> None:
    seen: list[tuple[float, str | None]] = []
    ctx = JobContext(on_progress=lambda u: seen.append((u.fraction, u.message)))
    ctx.progress(0.5)
    ctx.progress(1, "done")
    assert seen == [(0.5, None), (1.0, "done")]
    for bad in (1.5, -0.1, "half", None):
        with pytest.raises(ConfigError) as err:
            ctx.progress(bad)  # type: ignore[arg-type]
        assert err.value.code == "invalid_option" and "0.0 to 1.0" in str(err.value)
    ctx._close()
    with pytest.raises(RuntimeError, match="outside a running attempt"):
        ctx.progress(0.5)


def test_a_round_robin_flow_takes_turns_over_its_executions_keys() -> None:
    queue = Queue("memory://")
    ran: list[str] = []
    flow = queue.flow(
        "sync",
        concurrency=Concurrency(100, behavior="round_robin", key=lambda inp: inp["tenant"]),
    )

    @flow.step()
    def fetch(input: dict[str, Any]) -> None:
        ran.append(input["tenant"])

    for _ in range(10):
        flow.start({"tenant": "acme"})
    flow.start({"tenant": "globex"})
    _burst(queue)
    assert ran.index("globex") == 1, ran


def test_a_superseding_flow_needs_the_ability_and_latest_keeps_the_newest() -> None:
    queue = Queue("memory://")
    flow = queue.flow("publish", concurrency=Concurrency(1, behavior="latest"))

    @flow.step()
    def build(input: int) -> int:
        return input

    first, second, third = (flow.start(v) for v in (1, 2, 3))
    assert [e.status() for e in (first, second, third)] == ["running", "skipped", "queued"]
    _burst(queue)
    assert third.result(timeout=5) == {"build": 3}


def test_a_workflows_sub_flow_keeps_its_round_robin_turns() -> None:
    from queue_core import DurableContext
    from queue_core.storage.flows import step_job_id

    storage = MemoryStorage()
    queue = Queue(storage=storage)
    flow = queue.flow(
        "sync",
        concurrency=Concurrency(10, behavior="round_robin", key=lambda inp: inp["tenant"]),
    )

    @flow.step()
    def fetch(input: dict[str, Any]) -> str:
        return str(input["tenant"])

    @queue.workflow
    async def parent(ctx: DurableContext) -> Any:
        return await ctx.run_flow(flow, {"tenant": "acme"})

    execution = parent.start()
    _burst(queue)
    assert execution.result(timeout=5) == {"fetch": "acme"}
    spec = storage.store.jobs[step_job_id(execution.id + ".1", 0)].spec
    assert (spec.concurrency_behavior, spec.concurrency_group, spec.concurrency_key) == (
        "round_robin",
        "sync",
        "sync:acme",
    )
