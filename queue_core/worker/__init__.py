"""The worker: the only part of queue-core that imports anyio.

:class:`Worker` (:mod:`~queue_core.worker.runner`) is composed of parts that hold each
other, not stacked as layers of one object. Each run it assembles them on its event loop,
each given the state it needs and the worker's clock
(:class:`~queue_core.worker.timing.Timing`, wrapping
:class:`~queue_core.app.clock.Clock`: every reading and every service wait goes through
it), starts the services in its task group, runs the claim loop until a stop and then
the shutdown. Who holds and calls whom, top to bottom::

    Worker (runner)            checks settings, assembles the parts, starts the services,
     |                         runs the claim loop, then the shutdown
     +- ClaimLoop (claiming)   claims on its claim thread; starts each job, or gives
     |   |                     back a rate-limited one past its start bound (ratestart)
     |   +- Runner (running)   async bodies on the loop, sync ones on its BodyThreads
     |       +- ProcessRuns (process_runs) -> the process package (pool of children)
     |       +- Heartbeats (heartbeats)    the sinks of ctx.heartbeat()
     |       +- ProgressWriter (progress)  ctx.progress reports, on its own thread
     |       +- Recorder (recording)       end -> classification -> decision -> buffer
     |                                     (a workflow's wait: suspended, see durable)
     +- the services, one task each in the worker's task group:
     |   Finisher (finishing)      buffered ends -> its FinishThread -> storage.finish
     |   LeaseRenewer (leases)     every held lease renewed each third of the lease
     |   Heartbeats.run_writer     the heartbeats bodies queued, written
     |   Watchdog (watchdog)       deadlines and heartbeat silence -> Recorder
     |   Presence, CancelPoll (presence)   the worker's record; cancel requests
     |   reaper_loop (reaper), Replayer (replay)   reap, prune, auto-replay
     |   Scheduler (scheduler)     the ticks of periodic tasks (never in a burst)
     +- shared by the parts: RunState (state: data -- the slot table of Attempts,
        the buffered ends, the queued heartbeats, the stop request, the events that
        wake the tasks), Listeners (listeners), Outage (outage), DueTimes (timing)

The recorder is the one path of every attempt end: the runner, the claim loop (unknown
tasks), the watchdog, the finisher (dead-letter lines once written) and the shutdown
(releases) hold the same one. Eager mode
(:mod:`~queue_core.worker.eager`) runs a job in the caller's process through a recorder
of its own. :mod:`~queue_core.worker.process` is a package of its own (pool, children,
the child side, the direct and event-loop waits, results, places) that knows nothing of
jobs; its child side runs in another process and keeps its own clock. Settings are
checked in :mod:`~queue_core.worker.settings`; flow steps' calls and deadlines are
:mod:`~queue_core.worker.flowsteps`; what the worker logs is :mod:`~queue_core.worker.log`.
"""

from queue_core.worker.runner import Worker
from queue_core.worker.settings import worker_id

__all__ = ["Worker", "worker_id"]
