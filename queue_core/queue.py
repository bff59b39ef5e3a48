"""The ``Queue`` facade: declare tasks, enqueue, inspect jobs and dead letters, run workers."""

from __future__ import annotations

import dataclasses
import os
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar, overload

from queue_core.app.clock import Clock, SystemClock
from queue_core.app.config import (
    ENV_URL,
    UNSET,
    file_retry_policy,
    load_config,
    open_storage,
    resolve_url,
)
from queue_core.app.control import RateLimit
from queue_core.app.events import HeaderProvider, WorkerListener, with_headers
from queue_core.app.flow_control import FlowControl
from queue_core.app.handle import JobHandle
from queue_core.app.limited import enqueue_limited, needs_abilities
from queue_core.app.named import task_by_name
from queue_core.app.options import check_queue_arguments
from queue_core.app.serializer import Serializer, get_serializer
from queue_core.app.task import (
    AsyncTask,
    CallOptions,
    Task,
    TaskDecorator,
    TaskOptions,
    build_spec,
    check_args,
    check_name,
    check_timeout,
    default_task_name,
)
from queue_core.flows.facade import FlowMethods
from queue_core.records.control import Pause
from queue_core.records.durations import parse_duration, to_ms
from queue_core.records.errors import ConfigError
from queue_core.records.jobs import (
    DeadJob,
    JobState,
    NewJob,
    QueueStats,
)
from queue_core.rules import RetryPolicy
from queue_core.rules.paging import check_page
from queue_core.storage.abilities import SupportsMigrate, SupportsTemplateEnqueue
from queue_core.storage.protocol import Storage
from queue_core.storage.urls import mask_url

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from queue_core.app.periodic import Periodic
    from queue_core.flows.host import FlowHost
    from queue_core.worker.host import WorkerHost

__all__ = ["Queue"]

P = ParamSpec("P")
R = TypeVar("R")


_RAISE_SKIPPED: Final = JobState.SKIPPED

EAGER_EVERYWHERE = False
"""Set by the ``queue_core_eager`` fixture: every Queue runs eagerly (also those built before)."""

ON_EMBEDDED_DEFAULT: weakref.WeakSet[Queue] = weakref.WeakSet()
"""The queues built on the embedded default (``Queue()`` with no URL, env
``QUEUE_CORE_URL`` or configuration file): the ``queue_core_eager`` fixture gives them a
fresh ``memory://`` storage for each test, so tests never write ``./queue_core.db``."""


class Queue(FlowMethods):
    """A job queue bound to one storage.

    Args:
        url: storage URL (``memory://``, ``sqlite:///jobs.db``, ``redis://…``, …);
            ``None``: env ``QUEUE_CORE_URL``, else ``sqlite:///queue_core.db``.
        storage: a ready :class:`~queue_core.storage.protocol.Storage` instead of a URL.
        retry: queue-wide :class:`~queue_core.rules.RetryPolicy` defaults (first in
            the merge order queue -> task -> call).
        default_timeout: per-attempt bound for tasks that set none (``None``: no limit;
            default 300 s).
        lease: the lease workers take on a claimed job (a duration; default 30 s).
        serializer: ``"json"`` (default), ``"pickle"`` or a Serializer object.
        clock: the clock used for timestamps the facade computes (tests pass their own).
        eager: run every ``.delay()`` / ``.apply()`` to its end before returning, through
            the worker's classification, retry, timeout and dead-letter path, without a
            worker (application tests); default env ``QUEUE_CORE_EAGER``, else off.

    Every option not given here comes from the environment, then the configuration file
    (``queue-core.toml`` or ``[tool.queue-core]`` in ``pyproject.toml``; see
    :mod:`queue_core.app.config`), then the default: ``url`` (``QUEUE_CORE_URL``), ``eager``
    (``QUEUE_CORE_EAGER``), ``lease`` (``QUEUE_CORE_LEASE``), ``serializer``
    (``QUEUE_CORE_SERIALIZER``), ``default_timeout`` (``QUEUE_CORE_DEFAULT_TIMEOUT``, file
    ``[task] timeout``). The file's ``[task]`` retry options are the queue-wide retry
    defaults when ``retry`` is not given, and its ``[task] queue`` is the queue of tasks
    that set none.

    Attributes:
        url: the resolved storage URL as given, **password included** (the driver needs
            it): treat it as a secret. ``repr(queue)``, errors, logs, the CLI and the
            dashboard show :func:`~queue_core.storage.urls.mask_url` of it instead.
        config: the :class:`~queue_core.app.config.Config` the defaults were read from.
        default_queue: the queue of tasks that set none (``"default"``).
        eager: whether jobs run eagerly at enqueue.

    Raises:
        ConfigError: a bad URL or scheme (naming the supported schemes), or a bad option.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        storage: Storage | None = None,
        retry: RetryPolicy | None = None,
        default_timeout: float | str | timedelta | None = UNSET,
        lease: float | str | timedelta = UNSET,
        serializer: str | Serializer = UNSET,
        clock: Clock | None = None,
        eager: bool | None = None,
    ) -> None:
        check_queue_arguments(url, storage, retry, eager)
        cfg = self.config = load_config()
        if retry is None:
            retry = file_retry_policy(cfg)
        self.retry_policy: RetryPolicy = retry if retry is not None else RetryPolicy()
        self.default_timeout: float | None = check_timeout(
            cfg.value("task.timeout", default_timeout)
        )
        self.lease: float = parse_duration(cfg.value("lease", lease), field="lease")
        self.serializer: Serializer = get_serializer(cfg.value("serializer", serializer))
        self.default_queue: str = check_name(cfg.value("task.queue"), "queue")
        self.eager: bool = bool(cfg.value("eager", UNSET if eager is None else eager))
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._tasks: dict[str, Task[Any, Any]] = {}
        self._periodic: dict[str, Periodic] = {}
        self._lock = threading.Lock()
        self._header_providers: list[HeaderProvider] = []
        self._template_sink: tuple[Storage, SupportsTemplateEnqueue | None] | None = None
        self.worker_listeners: list[WorkerListener] = []
        """Listeners every worker of this queue calls (:meth:`add_worker_listener`)."""
        self._control = FlowControl(self.storage)
        if storage is not None:
            self.url = None
            self._storage: Storage = storage
        else:
            self.url = resolve_url(url)
            self._storage = open_storage(self.url)
            if url is None and not os.environ.get(ENV_URL) and not cfg.file_values.get("url"):
                ON_EMBEDDED_DEFAULT.add(self)

    def __repr__(self) -> str:
        where = mask_url(self.url) if self.url else type(self._storage).__name__
        return f"<Queue {where} tasks={len(self._tasks)}>"

    # ------------------------------------------------------------------ storage

    def storage(self) -> Storage:
        """The storage this queue reads and writes."""
        return self._storage

    def close(self) -> None:
        """Release the storage's connections. Idempotent."""
        self._storage.close()

    def migrate(self) -> None:
        """Create or upgrade the storage schema (when the backend manages one)."""
        if isinstance(self._storage, SupportsMigrate):
            self._storage.migrate()

    def stats(self) -> list[QueueStats]:
        """Per-queue job counts, sorted by queue name."""
        return self._storage.stats()

    # ------------------------------------------------------------------ hooks

    def add_header_provider(self, provider: HeaderProvider) -> None:
        """Call ``provider()`` at every enqueue and carry the string headers it returns
        with the job (read them in the worker with :func:`queue_core.app.events.job_headers`)."""
        self._header_providers.append(provider)

    def add_worker_listener(self, listener: WorkerListener) -> None:
        """Have every worker of this queue call ``listener`` (a
        :class:`~queue_core.app.events.WorkerListener`) besides its own listeners."""
        self.worker_listeners.append(listener)

    # ------------------------------------------------------------------ tasks

    @overload
    def task(self, func: Callable[P, Coroutine[Any, Any, R]], /) -> AsyncTask[P, R]: ...

    @overload
    def task(self, func: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self, func: None = None, /, *, name: str | None = None, **options: Unpack[TaskOptions]
    ) -> TaskDecorator: ...

    def task(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        **options: Unpack[TaskOptions],
    ) -> Task[Any, Any] | TaskDecorator:
        """Register a function as a task: ``@queue.task`` or ``@queue.task(...)``.

        The task is typed after the body: ``def f(a: int) -> str`` gives a
        ``Task[(a: int), str]``, so a type checker checks ``f.delay(...)``'s arguments
        and ``f.delay(...).result()``'s type (an ``async def`` body gives an
        :class:`~queue_core.app.task.AsyncTask`).

        Every option of SPEC §2 (:class:`~queue_core.app.task.TaskOptions`) is accepted and
        validated here. ``name`` defaults to ``module.qualname``; a function declared in
        a script run as ``python tasks.py`` is named after the module a worker imports
        (``tasks.send_welcome_email``), not ``__main__``.

        Raises:
            ConfigError: a bad option value, conflicting options, or a name already
                registered on this queue.
            TypeError: an unknown option.
        """
        spec = build_spec(is_async=False, options=options)  # unknown options fail here
        if name is not None:
            check_name(name, "name")

        def decorate(fn: Callable[..., Any]) -> Task[Any, Any]:
            if not callable(fn):
                raise TypeError(f"@queue.task expects a function, got {fn!r}")
            import inspect

            task_spec = spec
            if inspect.iscoroutinefunction(fn):  # isolation='process' conflicts with async
                task_spec = build_spec(is_async=True, options=options)
            task_name = name or default_task_name(fn)
            with self._lock:
                if task_name in self._tasks:
                    raise ConfigError(
                        f"duplicate task name {task_name!r}: already registered on this "
                        "queue — give one of them another name=",
                        code="invalid_option",
                        field="name",
                        value=task_name,
                    )
                cls = AsyncTask if inspect.iscoroutinefunction(fn) else Task
                task: Task[Any, Any] = cls(self, fn, name=task_name, spec=task_spec)
                self._tasks[task_name] = task
            return task

        if func is not None:
            return decorate(func)
        return decorate  # type: ignore[return-value]

    def periodic(
        self,
        every: float | str | timedelta | None = None,
        cron: str | None = None,
        tz: str = "UTC",
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        catch_up: bool = False,
        *,
        name: str | None = None,
        **options: Unpack[TaskOptions],
    ) -> TaskDecorator:
        """Register a task that workers enqueue on a schedule (SPEC §11).

        Exactly one of ``every`` (a duration; ticks are multiples of it since the Unix
        epoch) or ``cron`` (5 fields, or 6 with seconds first, read in ``tz``). Every
        tick enqueues one job with ``args``/``kwargs`` and ``run_at`` = the tick, however
        many workers run the scheduler. Ticks missed while no scheduler ran are skipped,
        or with ``catch_up=True`` run once. The function is also an ordinary task
        (``Task[P, R]``); ``name`` and ``**options`` are those of :meth:`task`.

        Raises:
            ConfigError: ``conflicting_options`` (``every`` with ``cron``),
                ``invalid_duration`` (a bad ``every``), ``invalid_cron``,
                ``invalid_option`` (an unknown ``tz``, no schedule, ``args`` not a
                sequence or ``kwargs`` not a dict), or a bad task option.
            TypeError: ``args``/``kwargs`` do not fit the function's signature.
        """
        from queue_core.app.periodic import Periodic
        from queue_core.rules.ticks import parse_schedule  # not at start-up

        schedule = parse_schedule(every, cron, tz, catch_up)
        call_args, call_kwargs = check_args(args, kwargs)
        call_kwargs = dict(call_kwargs)  # the caller's dict may change later
        register = self.task(name=name, **options)

        def decorate(fn: Callable[..., Any]) -> Task[Any, Any]:
            task: Task[Any, Any] = register(fn)
            try:
                task.check_arguments(call_args, call_kwargs, "periodic")
                self.serializer.dumps_payload(call_args, call_kwargs)  # now, not per tick
            except Exception:
                del self._tasks[task.name]
                raise
            self._periodic[task.name] = Periodic(task.name, schedule, call_args, call_kwargs)
            return task

        return decorate  # type: ignore[return-value]

    @property
    def periodic_tasks(self) -> dict[str, Periodic]:
        """Periodic tasks by task name (a copy)."""
        return dict(self._periodic)

    @property
    def tasks(self) -> dict[str, Task[Any, Any]]:
        """Registered tasks by name (a copy)."""
        return dict(self._tasks)

    def get_task(self, name: str) -> Task[Any, Any] | None:
        """The task registered under ``name``, or ``None``."""
        return self._tasks.get(name)

    # ------------------------------------------------------------------ enqueue

    def _submit_one(self, job: NewJob) -> JobHandle[Any]:
        if needs_abilities(job):
            return self._submit_many([job])[0]
        if self._header_providers:
            job = with_headers([job], self._header_providers)[0]
        self._storage.enqueue([job])
        if self.eager or EAGER_EVERYWHERE:
            self._run_eagerly(job.id)
        return JobHandle(self, job.id)

    def _submit_many(self, jobs: Sequence[NewJob]) -> list[JobHandle[Any]]:
        if not jobs:
            return []
        if self._header_providers:
            jobs = with_headers(jobs, self._header_providers)
        ids = [j.id for j in jobs]
        if any(needs_abilities(j) for j in jobs):
            ids = enqueue_limited(self._storage, jobs)
        else:
            self._storage.enqueue(jobs)
        if self.eager or EAGER_EVERYWHERE:
            new = {j.id for j in jobs}
            for job_id in dict.fromkeys(ids):
                if job_id in new:  # a duplicate's holder is not run again
                    self._run_eagerly(job_id)
        return [JobHandle(self, job_id) for job_id in ids]

    def template_sink(self) -> SupportsTemplateEnqueue | None:
        """The storage to hand a task's plain jobs to as template rows, or ``None`` when
        they take the ordinary path (no such ability, header providers, eager mode)."""
        if self._header_providers or self.eager or EAGER_EVERYWHERE:
            return None
        storage = self._storage
        cached = self._template_sink  # the protocol check is slow for a per-call path
        if cached is None or cached[0] is not storage:
            sink = storage if isinstance(storage, SupportsTemplateEnqueue) else None
            cached = self._template_sink = (storage, sink)
        return cached[1]

    def _run_eagerly(self, job_id: str) -> None:
        """Eager mode: run the job to its end now, on the worker's recording path."""
        from queue_core.worker.eager import EagerRunner

        EagerRunner(self).run(job_id)

    def enqueue(
        self,
        task_name: str,
        args: Iterable[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        allow_unregistered: bool = False,
        **overrides: Unpack[CallOptions],
    ) -> JobHandle[Any]:
        """Enqueue a job by task name (as the CLI does), with the task's options.

        Args:
            task_name: the registry name of a task registered on this queue.
            args: positional arguments of the body.
            kwargs: keyword arguments of the body.
            allow_unregistered: enqueue a name that is not registered in this process
                anyway, with the queue's defaults plus ``overrides`` (not the options
                the task declares elsewhere); a worker that knows the task runs it.
            **overrides: per-call options, as for :meth:`Task.apply`.

        Raises:
            ConfigError: ``code="unknown_task"``: the name is not registered here (import
                the task's module, or pass ``allow_unregistered=True``).
        """
        task = task_by_name(self, self._tasks, task_name, allow_unregistered, "enqueue")
        return task.apply(args, kwargs, **overrides)

    def enqueue_many(
        self,
        task: Task[Any, Any] | str,
        arg_tuples: Iterable[Any],
        *,
        allow_unregistered: bool = False,
    ) -> list[JobHandle[Any]]:
        """Enqueue one job per element (a tuple of positional arguments), in one batch.

        A task given by name must be registered on this queue, unless
        ``allow_unregistered=True`` (see :meth:`enqueue`).

        Raises:
            ConfigError: ``code="unknown_task"`` for a name not registered here.
        """
        if isinstance(task, str):
            task = task_by_name(self, self._tasks, task, allow_unregistered, "enqueue_many")
        return task.map(arg_tuples)

    # ------------------------------------------------------------------ flow control

    def rate_limit(
        self, name: str, rate: str, *, key: Callable[..., str] | None = None
    ) -> RateLimit:
        """A named :class:`~queue_core.app.control.RateLimit` that every task given it
        (``@queue.task(rate_limit=limit)``) shares: at most ``rate`` body starts of all of
        them together (per value of ``key`` when given). The same name again returns the
        same limit; another rate for it is a ``ConfigError`` (SPEC §13)."""
        return self._control.rate_limit(name, rate, key=key)

    def pause(
        self, queue: str | None = None, task: Task[Any, Any] | str | None = None, flow: Any = None
    ) -> list[Pause]:
        """Pause a queue, a task (or its name) and/or a flow (or its name), stored: every
        worker stops claiming their jobs (and starting their steps) within 1 s; running
        attempts finish, enqueues and schedules go on. Returns every pause now stored.
        ``ConfigError`` when none is given, or the storage cannot pause (SPEC §13)."""
        return self._control.pause(queue, task, flow)

    def resume(
        self, queue: str | None = None, task: Task[Any, Any] | str | None = None, flow: Any = None
    ) -> list[Pause]:
        """Undo :meth:`pause` for each one given; return the pauses left."""
        return self._control.resume(queue, task, flow)

    def paused(self) -> list[Pause]:
        """Every stored pause (``kind``, ``name``, ``since``), by kind then name."""
        return self._control.paused()

    # ------------------------------------------------------------------ jobs

    def job(self, job_id: str) -> JobHandle[Any]:
        """A handle on an existing job (no storage access until used)."""
        return JobHandle(self, job_id)

    async def job_async(self, job_id: str) -> JobHandle[Any]:
        """A handle on an existing job, from an event loop (the read runs in a thread).

        Unlike :meth:`job`, it reads the job once, so an unknown id fails here.

        Raises:
            NotFound: no job with that id.
        """
        from queue_core.app._aio import run_sync

        handle: JobHandle[Any] = JobHandle(self, job_id)
        await run_sync(handle.status)
        return handle

    def cancel(self, job_id: str) -> JobState:
        """Cancel a job; return its state afterwards (``NotFound`` for an unknown id)."""
        return self._storage.cancel(job_id)

    # ------------------------------------------------------------------ dead letters

    def _decoded(self, entry: DeadJob) -> DeadJob:
        if self.serializer.name == "json" or not entry.payload:
            return entry
        try:
            args, kwargs = self.serializer.loads_payload(entry.payload)
        except Exception:  # noqa: BLE001 - a corrupt payload keeps the entry listable
            return entry
        return dataclasses.replace(entry, args=tuple(args), kwargs=dict(kwargs))

    def dead_letters(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        """A page of dead-letter entries, newest first, optionally of one task.

        Raises:
            ConfigError: ``limit`` or ``offset`` is not an integer from 0 to
                :data:`~queue_core.rules.paging.MAX_PAGE_VALUE` (before any storage read).
        """
        limit, offset = check_page(limit, offset)
        return [self._decoded(e) for e in self._storage.list_dead(limit, offset, task_name)]

    def dead_letter(self, dead_id: str) -> DeadJob | None:
        """One dead-letter entry, or ``None``."""
        entry = self._storage.get_dead(dead_id)
        return None if entry is None else self._decoded(entry)

    def retry_dead(self, dead_id: str, queue: str | None = None) -> str:
        """Replay a dead job with a fresh attempt budget; return the new job id.

        Raises:
            NotFound: no dead-letter entry with that id.
        """
        if queue is not None:
            check_name(queue, "queue")
        return self._storage.retry_dead(dead_id, queue)

    def purge_dead(
        self,
        task_name: str | None = None,
        older_than: float | str | timedelta | None = None,
    ) -> int:
        """Delete dead-letter entries (of one task; dead at least ``older_than`` ago).

        Args:
            task_name: only entries of this task.
            older_than: seconds, a duration string or a ``timedelta``; ``0`` means every
                entry dead up to now. ``None`` (the default) applies no age limit.

        Returns:
            The number of entries removed.
        """
        before = None
        if older_than is not None:
            before = self.clock.now_ms() - _age_ms(older_than)
        return self._storage.purge_dead(task_name, before)

    # ------------------------------------------------------------------ worker

    def run_worker(
        self,
        queues: Sequence[str] | str | None = None,
        slots: int | None = None,
        burst: bool = False,
        reap_interval: float | str = 5.0,
        **options: Any,
    ) -> None:
        """Run a worker in this process until stopped (blocking).

        Args:
            queues: queue names to take jobs from; default env
                ``QUEUE_CORE_WORKER_QUEUES``, else ``[worker] queues`` of the configuration
                file, else every queue of a registered task plus ``"default"``.
            slots: jobs run at once (default env ``QUEUE_CORE_WORKER_SLOTS``, else
                ``[worker] slots`` of the configuration file, else 8).
            burst: return once nothing is running or ready (nor due within 60 s).
            reap_interval: seconds between reaper passes.
            **options: extra worker settings (``lease``, ``shutdown_grace``, ``isolation``,
                ``max_replacement_slots``, ``install_signal_handlers``, ``listeners``,
                ``prefetch``, ``flow_dirs`` and ``http_hosts`` -- default env, else
                ``[worker]`` of the configuration file); see :class:`queue_core.worker.Worker`.
        """
        from queue_core.worker import Worker

        config = load_config()  # read now: the working directory may have changed
        if slots is None:
            slots = config.value("worker.slots")
        if queues is None:
            queues = config.value("worker.queues")
        if options.get("prefetch") is None:
            options["prefetch"] = config.value("worker.prefetch")
        for name in ("flow_dirs", "http_hosts"):
            setting = config.get(f"worker.{name}")
            if options.get(name) is None and setting.source.startswith("file"):
                options[name] = setting.value  # the environment: the Worker reads it
        Worker(
            self, queues=queues, slots=slots, burst=burst, reap_interval=reap_interval, **options
        ).run()


def _age_ms(value: float | str | timedelta) -> int:
    """An age for ``purge_dead``: like a duration, except that zero is allowed."""
    if not isinstance(value, bool) and (
        (isinstance(value, (int, float)) and value == 0)
        or (isinstance(value, timedelta) and value == timedelta(0))
    ):
        return 0
    return to_ms(parse_duration(value, field="older_than"))


if TYPE_CHECKING:  # mypy checks that a Queue is what its parts ask of it

    def _hosts(queue: Queue) -> tuple[FlowHost, WorkerHost]:
        return queue, queue
