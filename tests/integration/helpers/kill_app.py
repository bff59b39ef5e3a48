"""A queue app for subprocess worker tests: ``python -m tests.integration.helpers.kill_app URL``.

The task ``slow_once`` writes a marker file for each attempt (so the test sees it start)
and sleeps on its first attempt long enough to be killed mid-job.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from queue_core import JobContext, Queue

queue = Queue(os.environ.get("QC_TEST_URL", "memory://"), lease=2)


@queue.task(name="slow_once", max_retries=2, retry_backoff="10ms", retry_jitter=0)
def slow_once(marker_dir: str, seconds: float, ctx: JobContext) -> str:
    Path(marker_dir, f"attempt-{ctx.attempt}-{os.getpid()}").write_text("started")
    if ctx.attempt == 1:
        time.sleep(seconds)
    return f"done on attempt {ctx.attempt}"


if __name__ == "__main__":
    queue.run_worker(
        burst="--burst" in sys.argv,
        slots=2,
        reap_interval=0.5,
        shutdown_grace=float(os.environ.get("QC_TEST_GRACE", "5")),
    )
