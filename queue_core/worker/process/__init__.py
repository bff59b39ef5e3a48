"""``isolation="process"``: sync task bodies in warm child processes that can really be stopped.

The package, by who calls whom:

* :mod:`~queue_core.worker.process.pool` -- :class:`ProcessPool`: at most ``size``
  attempts at once, children started lazily and reused; :meth:`ProcessPool.run` waits
  for a child on the event loop (with :mod:`~queue_core.worker.process.exchange`),
  :meth:`ProcessPool.run_direct` on the calling thread (with
  :mod:`~queue_core.worker.process.direct`);
* :mod:`~queue_core.worker.process.children` -- the parent's side of one child (its
  pipes, start, stop of its process group), the pool's set of children both paths
  share, and the run request;
* :mod:`~queue_core.worker.process.places` -- the limit on attempts at once;
* :mod:`~queue_core.worker.process.results` -- :class:`ProcessResult`,
  :class:`ProcessOutcome` and the errors a child reports;
* :mod:`~queue_core.worker.process.child` -- what runs in the child (standard library
  only, its own clock).

The package knows nothing of jobs or attempts: the worker's
:mod:`~queue_core.worker.process_runs` turns an attempt into a request and a
:class:`ProcessResult` into an attempt end.
"""

from queue_core.worker.process.pool import ProcessPool
from queue_core.worker.process.results import (
    ChildError,
    ChildStartError,
    ProcessOutcome,
    ProcessResult,
    RemoteError,
    RemoteTaskError,
)

__all__ = [
    "ChildError",
    "ChildStartError",
    "ProcessOutcome",
    "ProcessPool",
    "ProcessResult",
    "RemoteError",
    "RemoteTaskError",
]
