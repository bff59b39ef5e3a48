"""The pure scheduling core: retry policy, error classification, decisions, lease timing.

Nothing in this package does I/O, reads a clock or draws random numbers of its own:
``now`` and ``rng`` are arguments, so every function here is a table of inputs in tests.
"""

from queue_core.rules.classify import classify, error_names, validate_exception_classes
from queue_core.rules.decide import decide, lost_delay_ms
from queue_core.rules.leases import (
    REAP_MARGIN_MS,
    expired_bound,
    heartbeat_write_due,
    reap_cutoff,
    reap_due,
    renew_interval,
    schedule_to_start_expired,
)
from queue_core.rules.outcomes import (
    DEFAULT_RETENTION_MS,
    ReapVerdict,
    end_state,
    parse_retention,
    reap_outcome,
    reap_place_at,
    reap_ready_at,
    reap_verdict,
    replay_count,
    replay_job,
)
from queue_core.rules.retry import (
    BackoffKind,
    RetryPolicy,
    merge_policies,
    policy_from_options,
)

__all__ = [
    "DEFAULT_RETENTION_MS",
    "REAP_MARGIN_MS",
    "reap_cutoff",
    "reap_due",
    "ReapVerdict",
    "end_state",
    "parse_retention",
    "reap_outcome",
    "reap_place_at",
    "reap_ready_at",
    "reap_verdict",
    "replay_count",
    "replay_job",
    "BackoffKind",
    "RetryPolicy",
    "classify",
    "decide",
    "error_names",
    "expired_bound",
    "heartbeat_write_due",
    "lost_delay_ms",
    "merge_policies",
    "policy_from_options",
    "renew_interval",
    "schedule_to_start_expired",
    "validate_exception_classes",
]
