"""The state every part of the worker shares, declared once.

The :class:`~queue_core.worker.runner.Worker` is assembled from one class per
responsibility, stacked in this order (each may use the ones below it):

* :class:`WorkerState` (here): the attributes and the small helpers all parts use;
* :class:`~queue_core.worker.recording.AttemptRecording`: an attempt's end, its
  classification, the core's decision, the one dead-letter path and the one log line;
* :class:`~queue_core.worker.services.Services`: lease renewal, the heartbeat writer,
  the deadline and heartbeat watchdog, the finisher, auto-replay, shutdown;
* :class:`~queue_core.worker.running.Running`: running bodies (async, thread, process);
* :class:`~queue_core.worker.claiming.Claiming`: the claim loop and direct starts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queue_core.events import WorkerListener
from queue_core.model import AttemptEnd
from queue_core.storage import Storage
from queue_core.worker.outage import Outage
from queue_core.worker.reaper import Backoff
from queue_core.worker.slots import Attempt, SlotTable
from queue_core.worker.timing import DueTimes, Timing

if TYPE_CHECKING:
    import anyio
    import anyio.abc

    from queue_core.queue import Queue
    from queue_core.serializer import Serializer
    from queue_core.task import Task
    from queue_core.worker.finishing import FinishThread
    from queue_core.worker.recording import CallOptions
    from queue_core.worker.threads import BodyThreads, StorageThread

__all__ = ["WorkerState"]


class WorkerState:
    """Attributes shared by the parts of the worker (set by ``Worker.__init__`` and
    ``Worker.run_async``)."""

    queue: Queue
    storage: Storage
    id: str
    slots: int
    burst: bool
    lease: float
    lease_ms: int
    reap_interval: float
    shutdown_grace: float
    presence_ttl_ms: int
    isolation: str
    max_tasks_per_child: int | None
    _timing: Timing
    _retries_due: DueTimes
    _outage: Outage
    """Storage outages: one WARNING when one starts, one INFO when it ends."""
    """Retries this worker scheduled (system monotonic time): bound the idle wait."""
    _table: SlotTable
    _serializer: Serializer
    _rng: Callable[[], float]
    _call_cache: dict[str, CallOptions]
    _fits: dict[tuple[str, int, tuple[str, ...]], str | None]
    """Per task and call shape: why such a call does not bind, or ``None``."""
    _ends: list[AttemptEnd]
    _heartbeats: dict[Any, Attempt]
    _stop: threading.Event
    _stopping: bool
    _processed: int
    _process_pool: Any
    _flush_backoff: Backoff
    _burst_said: int | None
    _listeners: tuple[WorkerListener, ...] = ()
    """``Queue.worker_listeners`` then the worker's own (``Worker(listeners=...)``)."""
    _replay_counts: dict[str, int | None]
    """Dead-letter ids seen by auto-replay -> replays that led to them (``None`` unknown):
    a cache of what storage holds (an entry's count never changes), so an entry kept
    past ``max_replays`` is read once, not on every pass."""
    # set by run_async
    _queues: list[str]
    _tasks: dict[str, Task[Any, Any]]
    """The queue's tasks, plus the one ``type: script`` flow steps run with."""
    _specs: dict[str, Any]
    """Flow definitions (``FlowSpec``) read for script steps, by spec hash."""
    _io: anyio.CapacityLimiter
    _event: Callable[[], anyio.Event]
    """Makes an ``anyio.Event`` of the running backend (see ``threads.event_class``)."""
    _flush_wake: anyio.Event
    _slot_wake: anyio.Event
    _hb_wake: anyio.Event
    _flushing: bool
    _delivering: bool = False
    """Body-thread ends are being taken on the loop: the delivery hands the ends over
    to the finish thread when done (:meth:`Services._delivery_ended`), so recording
    one does not wake the finisher task."""
    _wakeup: bool
    _threads: BodyThreads
    _claim_io: StorageThread
    _finish_io: FinishThread
    _finish_failed: BaseException | None
    """The finish thread's last failed write, not yet handled by the finisher."""
    _tg: anyio.abc.TaskGroup

    def _request_stop(self) -> None:
        self._stopping = True
        self._stop.set()
        self._slot_wake.set()

    def _stop_attempt(self, att: Attempt) -> None:
        """Stop what can be stopped of ``att``'s body (ctx cancel, cancel scope)."""
        if att.ctx is not None:
            att.ctx._cancel()
        if att.scope is not None:
            att.scope.cancel()
