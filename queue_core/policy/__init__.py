"""The pure scheduling core: retry policy, error classification, decisions, lease timing.

Nothing in this package does I/O, reads a clock or draws random numbers of its own:
``now`` and ``rng`` are arguments, so every function here is a table of inputs in tests.
"""

from queue_core.policy.retry import RetryPolicy, merge_policies, policy_from_options

__all__ = ["RetryPolicy", "merge_policies", "policy_from_options"]
