"""Flows with real worker processes on Redis Cluster and SQS in the default run.

The whole of ``test_flows_e2e.py`` runs on these two in ``nox -s soak`` only (minutes on
a cluster and on moto); the default run keeps one real-worker flow on each: the diamond
(release of a fan-out, results passed to the join, two worker processes).
"""

from __future__ import annotations

import pytest

from tests.integration.test_flows_e2e import env, test_diamond_passes_both_results_to_the_join, url

__all__ = ["env", "test_diamond_passes_both_results_to_the_join", "url"]

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.parametrize("url", ["redis_cluster", "sqs"], indirect=True),
]
