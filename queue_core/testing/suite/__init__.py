"""The contract suite, one mixin class per topic; :class:`StorageContract` combines them.

Each mixin's test methods take a ``storage`` fixture that the backend author provides
(see :mod:`queue_core.testing`). Tests use only the :class:`~queue_core.storage.protocol.Storage`
protocol, pass explicit ``now`` times and never sleep.
"""

from queue_core.testing.suite._base import ContractBase, StorageWithRetention
from queue_core.testing.suite.cancel import CancelContract
from queue_core.testing.suite.claim import ClaimContract
from queue_core.testing.suite.concurrency import ConcurrencyContract
from queue_core.testing.suite.control import DebounceContract, PauseContract, ProgressContract
from queue_core.testing.suite.dead import DeadLetterContract
from queue_core.testing.suite.durable import (
    DurableContract,
    WorkflowEventContract,
    WorkflowSuspendContract,
)
from queue_core.testing.suite.durable_children import WorkflowChildrenContract
from queue_core.testing.suite.enqueue import EnqueueContract
from queue_core.testing.suite.fairness import RoundRobinContract, SupersedeContract
from queue_core.testing.suite.finish import FinishContract
from queue_core.testing.suite.flowcontrol import FlowSupersedeContract
from queue_core.testing.suite.flows import FlowContract
from queue_core.testing.suite.lease import LeaseContract
from queue_core.testing.suite.limits import RateLimitContract, UniqueContract
from queue_core.testing.suite.optional import OptionalAbilitiesContract, WaitClaimContract
from queue_core.testing.suite.outage import OutageContract
from queue_core.testing.suite.payload import PayloadContract
from queue_core.testing.suite.prefetch import PrefetchContract
from queue_core.testing.suite.prune import PruneContract
from queue_core.testing.suite.races import RaceContract
from queue_core.testing.suite.reap import ReapContract
from queue_core.testing.suite.resume import ResumeContract
from queue_core.testing.suite.schedule import ScheduleToStartContract
from queue_core.testing.suite.schedules import ScheduleContract
from queue_core.testing.suite.stats import StatsContract
from queue_core.testing.suite.template import TemplateEnqueueContract
from queue_core.testing.suite.throughput import ThroughputContract
from queue_core.testing.suite.workers import WorkerContract

__all__ = [
    "CancelContract",
    "ClaimContract",
    "ConcurrencyContract",
    "ContractBase",
    "DeadLetterContract",
    "DurableContract",
    "DebounceContract",
    "EnqueueContract",
    "FinishContract",
    "FlowContract",
    "FlowSupersedeContract",
    "LeaseContract",
    "OptionalAbilitiesContract",
    "OutageContract",
    "PauseContract",
    "ProgressContract",
    "PayloadContract",
    "PrefetchContract",
    "PruneContract",
    "RaceContract",
    "RateLimitContract",
    "ReapContract",
    "ResumeContract",
    "RoundRobinContract",
    "ScheduleContract",
    "ScheduleToStartContract",
    "StatsContract",
    "StorageContract",
    "StorageWithRetention",
    "SupersedeContract",
    "ThroughputContract",
    "WorkerContract",
    "UniqueContract",
    "TemplateEnqueueContract",
    "WaitClaimContract",
    "WorkflowChildrenContract",
    "WorkflowEventContract",
    "WorkflowSuspendContract",
]


class StorageContract(
    EnqueueContract,
    ClaimContract,
    LeaseContract,
    PrefetchContract,
    FinishContract,
    ReapContract,
    DeadLetterContract,
    ConcurrencyContract,
    CancelContract,
    ScheduleToStartContract,
    PruneContract,
    StatsContract,
    RaceContract,
    PayloadContract,
    OptionalAbilitiesContract,
    OutageContract,
    FlowContract,
    DurableContract,
    WorkerContract,
    ScheduleContract,
    UniqueContract,
    RateLimitContract,
    ThroughputContract,
    RoundRobinContract,
    SupersedeContract,
    DebounceContract,
    PauseContract,
    ProgressContract,
    FlowSupersedeContract,
):
    """Every contract test (the flow tests, :class:`FlowContract`, skip naming
    ``SupportsFlows`` on a storage without that ability; the workflow tests,
    :class:`DurableContract`, skip naming ``SupportsWorkflows``). Subclass it as
    ``TestMyStorage`` and provide ``storage``
    (and ``storage_with_retention``, see :data:`StorageWithRetention`, when the backend
    takes a ``?retention=`` option: the retention tests skip without it; and
    ``unreachable_storage``, see :class:`OutageContract`, when the backend has a server
    that can be down: the outage tests skip without it).

    Class attributes a subclass may override:

    * ``retention_ms``: the retention the fixture's storage was built with
      (default 7 days, the protocol default).
    * ``race_threads``: how many threads the race tests start (default 8).
    """
