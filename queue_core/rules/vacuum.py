"""When a storage with dead row versions (PostgreSQL) should clean its jobs table itself.

On PostgreSQL every claim and every finish leaves a dead version of the job row and dead
entries in the indexes (no job update is HOT); the claim walks the dead entries of the
jobs claimed since the table was last vacuumed before it finds a queued one. Autovacuum
visits a database at most once per ``autovacuum_naptime`` (1 minute by default), so a
busy queue can leave a minute of claimed jobs in the claim's way. The worker's reaper
pass asks :func:`vacuum_due` with the table's counts and vacuums when it says so (the
backend does the I/O: :mod:`backends.sql.vacuum`).

The rule keeps the dead rows bounded by a fixed count, not by the history: a vacuum's
index pass reads every index of the table, so its cost grows with the kept history, and
the rule also keeps vacuums to a share of the time (:data:`VACUUM_DUTY`).
"""

from __future__ import annotations

__all__ = ["VACUUM_DEAD_ROWS", "VACUUM_DUTY", "vacuum_due"]

VACUUM_DEAD_ROWS = 10_000
"""Dead row versions of the jobs table from which a vacuum is due: about 5,000 claimed
and finished jobs (a claim and a finish each leave one), a few dozen index leaf pages for
the claim to walk whatever the history."""

VACUUM_DUTY = 0.2
"""The share of the time this worker's vacuums may take: after a vacuum that took ``d``,
the next waits until ``d / VACUUM_DUTY`` has passed since the table's last vacuum."""


def vacuum_due(
    dead_rows: int,
    since_vacuum_ms: int | None,
    last_took_ms: int,
    *,
    dead_rows_at: int = VACUUM_DEAD_ROWS,
    duty: float = VACUUM_DUTY,
) -> bool:
    """Whether to vacuum the jobs table now.

    Args:
        dead_rows: the table's dead row versions now (PostgreSQL: ``n_dead_tup``).
        since_vacuum_ms: milliseconds since its last vacuum (by anyone, autovacuum
            included) ended; ``None`` if it was never vacuumed.
        last_took_ms: how long this process's last vacuum of it took (0: none yet).
        dead_rows_at: the dead rows from which a vacuum is due.
        duty: the share of the time vacuums may take (0 < duty <= 1).

    Returns:
        ``True`` when there are at least ``dead_rows_at`` dead rows and at least
        ``last_took_ms / duty`` has passed since the last vacuum.
    """
    if dead_rows < dead_rows_at:
        return False
    if since_vacuum_ms is None or last_took_ms <= 0:
        return True
    return since_vacuum_ms * duty >= last_took_ms
