"""The chaos drain: worker processes drain a mixed workload while a driver SIGKILLs them.

:func:`run_chaos` enqueues ``jobs`` jobs of :mod:`tests.chaos.app` (kinds fixed by the
job number), starts ``workers`` ``queue-core worker`` processes, and every 1-3 s (seeded)
SIGKILLs a random one and starts a replacement, until storage says every job has
finished. Then it stops the workers and :func:`check` judges the result **from storage
alone** (plus the side channel of executions the bodies wrote):

* every job exists and is in exactly one terminal state, the one its kind must end in
  (``fatal`` -> ``dead``/``fatal``, every other kind -> ``succeeded``);
* its attempts are numbered 1..n once each (n = the job's attempt count), none left
  running, every attempt but the last ``lost``/``failed``/``timed_out`` as its kind
  allows, and every attempt recorded as run (not ``lost``) has a body execution in the
  side channel, no execution belongs to an unrecorded attempt, no attempt ran twice;
* no lease is left: no queue counts a running job, and a reaper pass finds nothing;
* no concurrency slot leaked: of ``LIMIT + 1`` fresh ``limited`` jobs, a claim gets
  exactly ``LIMIT``;
* the dead-letter store holds exactly one entry per ``fatal`` job and nothing else.

Violations are collected (not asserted one by one) so the report shows them all.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queue_core import JobState, Outcome, Queue, StorageError, Task
from queue_core.records.jobs import AttemptRecord, JobRecord
from tests.chaos.app import FLAKY_FAILURES, KINDS, LIMIT, kind_of, register

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.chaos.app:queue"
CLI = str(Path(sys.executable).parent / "queue-core")

# attempt outcomes each kind may record before its last attempt
_EARLIER: dict[str, set[Outcome]] = {
    "noop": {Outcome.LOST},
    "proc": {Outcome.LOST},
    "limited": {Outcome.LOST},
    "fatal": {Outcome.LOST},
    "flaky": {Outcome.LOST, Outcome.FAILED},
    "slow": {Outcome.LOST, Outcome.TIMED_OUT},
}


@dataclass
class ChaosReport:
    """What one chaos drain did and what the check found."""

    backend: str
    jobs: int
    kills: int = 0
    seconds: float = 0.0
    attempts: int = 0
    lost_attempts: int = 0  # attempts recorded ``lost`` (each one recovered by a retry)
    recovered_jobs: int = 0  # jobs with a lost attempt that still ended as their kind must
    ran_twice: int = 0  # jobs whose body started in a lost attempt and again later
    jobs_lost: int = 0  # jobs missing, unfinished or ended in the wrong state
    dead_letters: int = 0
    # seconds from a lost attempt's reap (its finished_at) to the next attempt's start
    reaped_waits: list[float] = field(default_factory=list)
    by_state: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def reaped_wait(self) -> str:
        """Median / max seconds a reaped job waited for its next attempt."""
        if not self.reaped_waits:
            return "-"
        return f"{statistics.median(self.reaped_waits):.1f} / {max(self.reaped_waits):.1f} s"

    def row(self) -> str:
        return (
            f"| {self.backend} | {self.jobs:,} | {self.kills} | {self.attempts:,} | "
            f"{self.lost_attempts} / {self.recovered_jobs} | {self.ran_twice} | "
            f"{self.dead_letters} | {self.jobs_lost} | {len(self.violations)} | "
            f"{self.reaped_wait()} | {self.seconds:.0f} s |"
        )


TABLE_HEADER = (
    "| backend | jobs | kills | attempts | attempts lost / jobs recovered | jobs run twice "
    "| DLQ entries | jobs lost | violations | reaped job's wait (median / max) | drain |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def table(reports: Sequence[ChaosReport]) -> str:
    """The Markdown table of several reports."""
    return "\n".join([TABLE_HEADER, *(r.row() for r in reports)])


# --------------------------------------------------------------------------- workers


class Workers:
    """A set of ``queue-core worker`` subprocesses of ``app`` that can be killed and
    replaced."""

    def __init__(
        self,
        url: str,
        folder: Path,
        n: int,
        lease: float,
        slots: int,
        app: str = APP,
        env: dict[str, str] | None = None,
    ) -> None:
        self.app = app
        self.slots = slots
        self.env = dict(
            os.environ,
            QUEUE_CORE_URL=url,
            QC_CHAOS_DIR=str(folder),
            QC_CHAOS_LEASE=str(lease),
            PYTHONPATH=str(ROOT),
            **(env or {}),
        )
        self.folder = folder
        self.started = 0
        self.killed: list[int] = []  # pids SIGKILLed, in order
        self.stderr: dict[int, Path] = {}
        self.procs = [self.spawn() for _ in range(n)]

    def spawn(self) -> subprocess.Popen[bytes]:
        self.started += 1
        with open(self.folder / f"worker{self.started}.err", "wb") as err:
            proc = subprocess.Popen(
                [CLI, "worker", self.app, "--slots", str(self.slots), "--reap-interval", "0.5"]
                + ["--log-level", "warning"],
                cwd=ROOT,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        self.stderr[proc.pid] = self.folder / f"worker{self.started}.err"
        return proc

    def kill_one(self, rng: random.Random, among: Collection[int] = ()) -> None:
        """SIGKILL a random worker (one whose pid is in ``among``, when any is) and start
        a replacement."""
        busy = [k for k, p in enumerate(self.procs) if p.pid in among]
        k = rng.choice(busy) if busy else rng.randrange(len(self.procs))
        victim = self.procs[k]
        victim.send_signal(signal.SIGKILL)
        self.killed.append(victim.pid)
        victim.wait(10)
        self.procs[k] = self.spawn()

    def crashed(self) -> list[str]:
        """Workers that exited on their own (not killed): their stderr tails."""
        out = []
        for p in self.procs:
            if p.poll() is not None:
                tail = self.stderr[p.pid].read_text(errors="replace")[-2000:]
                out.append(f"worker pid {p.pid} exited {p.returncode} on its own:\n{tail}")
        return out

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


# --------------------------------------------------------------------------- the drain


@dataclass
class Drive:
    """How a :func:`drive` went."""

    kills: int = 0
    seconds: float = 0.0
    left: int = 0  # work still open when it stopped (0 = drained)
    crashes: list[str] = field(default_factory=list)  # workers that exited on their own


def drive(
    pool: Workers,
    rng: random.Random,
    remaining: Callable[[], int],
    *,
    kill_every: tuple[float, float],
    timeout: float,
    poll: float = 0.1,
    busy: Callable[[], Collection[int]] | None = None,
) -> Drive:
    """Until ``remaining()`` is 0, SIGKILL a random worker of ``pool`` every
    ``kill_every`` seconds (uniform, from ``rng``) and start a replacement; stop early
    when ``timeout`` passes or a worker exits on its own. Stops ``pool`` at the end.
    The first kill is due sooner, in the first half of the shortest interval: a drain
    that ended in 2.5 s once saw no kill at all (the first was due at 2.4 s).

    ``busy``: the pids of workers running an attempt now (read from storage). A kill
    that is due waits (up to :data:`AIM_S`) for a busy worker and kills one of those, so
    the kills cut attempts rather than land on idle workers by chance (on SQS, whose
    bodies are short next to moto's round trips, five random kills once all missed)."""
    out = Drive()
    t0 = time.monotonic()
    next_kill = t0 + rng.uniform(kill_every[0] / 4, kill_every[0] / 2)
    try:
        while (left := remaining()) > 0:
            now = time.monotonic()
            if now - t0 > timeout:
                out.left = left
                break
            out.crashes = pool.crashed()
            if out.crashes:
                break
            if now >= next_kill:
                among = busy() if busy is not None else ()
                if among or busy is None or now >= next_kill + AIM_S:
                    pool.kill_one(rng, among)
                    out.kills += 1
                    next_kill = now + rng.uniform(*kill_every)
            time.sleep(poll)
        out.seconds = time.monotonic() - t0
    finally:
        pool.stop()
    return out


AIM_S = 2.0
"""How long a due kill waits for a worker running an attempt before it kills any."""


def busy_pids(q: Queue) -> Callable[[], set[int]]:
    """The pids of the workers with an attempt running now, from storage: the running
    jobs' open attempts name their worker, whose record (``list_workers``) has its pid."""

    def read() -> set[int]:
        storage = q.storage()
        running: set[str | None] = set()
        try:
            for job in storage.list_jobs(state=JobState.RUNNING, limit=50):
                running.update(
                    a.worker_id for a in storage.list_attempts(job.id) if a.outcome is None
                )
            return {w.pid for w in storage.list_workers() if w.id in running}
        except StorageError:
            return set()  # a server fault drain: the server is down now; aim at the next poll

    return read


def _unfinished(q: Queue) -> int:
    n = 0
    for s in q.stats():
        n += s.ready + s.scheduled + s.running
    return n


def run_chaos(
    url: str,
    backend: str,
    jobs: int,
    folder: Path,
    *,
    workers: int = 3,
    kill_every: tuple[float, float] = (1.0, 3.0),
    lease: float = 2.0,
    slots: int = 2,
    seed: int = 13,
    timeout: float = 900.0,
) -> ChaosReport:
    """Drain ``jobs`` jobs on ``url`` under SIGKILLs; return the checked report."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    report = ChaosReport(backend, jobs)
    q = Queue(url, lease=lease)
    try:
        q.migrate()
        tasks = register(q)
        ids: dict[str, list[str]] = {}
        for kind in KINDS:
            args = [(i,) for i in range(jobs) if kind_of(i) == kind]
            ids[kind] = [h.id for h in tasks[kind].map(args)] if args else []
        pool = Workers(url, folder, workers, lease, slots)
        run = drive(
            pool,
            rng,
            lambda: _unfinished(q),
            kill_every=kill_every,
            timeout=timeout,
            busy=busy_pids(q),
        )
        report.kills, report.seconds = run.kills, run.seconds
        report.violations.extend(run.crashes)
        if run.left:
            report.violations.append(f"drain not finished within {timeout:.0f} s")
        check(q, tasks, ids, folder, report)
    finally:
        q.close()
    return report


# --------------------------------------------------------------------------- the check


def _executions(folder: Path) -> dict[str, Counter[int]]:
    """Executions per job number and attempt, from the side channel: ``{i: {attempt: n}}``."""
    out: dict[str, Counter[int]] = defaultdict(Counter)
    for path in folder.glob("exec-*.log"):
        for line in path.read_text().splitlines():
            _, i, attempt, _pid = line.split()
            out[i][int(attempt)] += 1
    return out


def _check_job(
    kind: str,
    job: JobRecord | None,
    records: list[AttemptRecord],
    runs: Counter[int],
    report: ChaosReport,
) -> None:
    if job is None:
        report.jobs_lost += 1
        report.violations.append(f"{kind} job: missing from storage")
        return
    where = f"{kind} job {job.id}"
    report.by_state[job.state.value] += 1
    want = JobState.DEAD if kind == "fatal" else JobState.SUCCEEDED
    if job.state is not want:
        report.jobs_lost += 1
        report.violations.append(f"{where}: ended {job.state.value}, expected {want.value}")
    if kind == "fatal" and job.reason != "fatal":
        report.violations.append(f"{where}: dead with reason {job.reason!r}, expected 'fatal'")
    report.attempts += len(records)
    numbers = [r.number for r in records]
    if numbers != list(range(1, job.attempts + 1)):
        report.violations.append(f"{where}: attempts {numbers}, job says {job.attempts}")
    if records:
        _check_outcomes(kind, where, records, report)
        _check_executions(kind, where, records, runs, report)
    lost = [r.number for r in records if r.outcome is Outcome.LOST]
    report.lost_attempts += len(lost)
    report.reaped_waits += _reaped_waits(records)
    if lost and job.state is want:
        report.recovered_jobs += 1
    if any(runs[n] > 0 for n in lost) and len(runs) > 1:
        report.ran_twice += 1


def _reaped_waits(records: list[AttemptRecord]) -> list[float]:
    """For each lost attempt followed by another: seconds from its reap to the next start."""
    out = []
    for rec, nxt in zip(records, records[1:], strict=False):
        if rec.outcome is Outcome.LOST and rec.finished_at and nxt.started_at:
            out.append(max(0.0, (nxt.started_at - rec.finished_at).total_seconds()))
    return out


def _check_outcomes(
    kind: str, where: str, records: list[AttemptRecord], report: ChaosReport
) -> None:
    last, earlier = records[-1], records[:-1]
    want_last = Outcome.FAILED if kind == "fatal" else Outcome.SUCCEEDED
    if last.outcome is not want_last:
        report.violations.append(f"{where}: last attempt {last.outcome}, expected {want_last}")
    bad = [r.outcome for r in earlier if r.outcome not in _EARLIER[kind]]
    if bad:
        report.violations.append(f"{where}: earlier attempts ended {bad}")


def _check_executions(
    kind: str, where: str, records: list[AttemptRecord], runs: Counter[int], report: ChaosReport
) -> None:
    seen = [(r.number, str(r.outcome), r.reason, runs[r.number]) for r in records]
    twice = [n for n, c in runs.items() if c > 1]
    if twice:
        report.violations.append(f"{where}: attempt(s) {twice} executed more than once")
    unrecorded = set(runs) - {r.number for r in records}
    if unrecorded:
        report.violations.append(f"{where}: executions of unrecorded attempts {unrecorded}")
    # a lost attempt may die before its body starts, and so may a timed-out one (a
    # process-isolated child that did not start within the timeout); no other may
    ran = (Outcome.SUCCEEDED, Outcome.FAILED)
    unrun = [r.number for r in records if r.outcome in ran and not runs[r.number]]
    if unrun:
        report.violations.append(f"{where}: attempts {unrun} recorded as run, never executed")
    failed = sum(r.outcome is Outcome.FAILED for r in records)
    if kind == "flaky" and (failed > FLAKY_FAILURES or sum(runs.values()) <= FLAKY_FAILURES):
        report.violations.append(f"{where}: {failed} failures in {seen}")
    # the first execution of a slow job sleeps past its timeout, so it runs at least
    # twice; more timeouts are possible (a process child that starts too late on a busy
    # machine times out too), so they are not bounded here
    if kind == "slow" and sum(runs.values()) < 2:
        report.violations.append(f"{where}: one execution only, in {seen}")


def check(
    q: Queue,
    tasks: dict[str, Task[Any, Any]],
    ids: dict[str, list[str]],
    folder: Path,
    report: ChaosReport,
) -> None:
    """Judge the drained storage; fill ``report`` (see the module docstring)."""
    storage = q.storage()
    execs = _executions(folder)
    number_of: dict[str, int] = {}
    for kind, job_ids in ids.items():
        numbers = [i for i in range(report.jobs) if kind_of(i) == kind]
        number_of.update(zip(job_ids, (str(i) for i in numbers), strict=True))
    for kind, job_ids in ids.items():
        for job_id in job_ids:
            job = storage.get_job(job_id)
            records = storage.list_attempts(job_id) if job is not None else []
            _check_job(kind, job, records, execs.get(number_of[job_id], Counter()), report)
    running = sum(s.running for s in storage.stats())
    if running:
        report.violations.append(f"{running} jobs still count as running (leaked leases)")
    reaped = storage.reap(limit=1000)
    if reaped:
        report.violations.append(f"a reaper pass after the drain found {len(reaped)} attempts")
    _check_dead_letters(q, set(ids["fatal"]), report)
    _check_concurrency_slots(q, tasks["limited"], report)


def _check_dead_letters(q: Queue, fatal_ids: set[str], report: ChaosReport) -> None:
    entries = []
    while True:
        page = q.storage().list_dead(1000, len(entries), None)
        entries += page
        if len(page) < 1000:
            break
    report.dead_letters = len(entries)
    per_job = Counter(e.job_id for e in entries)
    if set(per_job) != fatal_ids or any(c != 1 for c in per_job.values()):
        extra = set(per_job) - fatal_ids
        missing = fatal_ids - set(per_job)
        report.violations.append(
            f"dead letters: {len(extra)} unexpected, {len(missing)} missing, "
            f"{sum(c > 1 for c in per_job.values())} duplicated"
        )
    if any(e.reason != "fatal" for e in entries):
        report.violations.append("a dead-letter entry has a reason other than 'fatal'")


def _check_concurrency_slots(q: Queue, limited: Task[Any, Any], report: ChaosReport) -> None:
    probe = limited.map([(-k,) for k in range(1, LIMIT + 2)])
    claimed = q.storage().claim("chaos-probe", ["default"], 10 * LIMIT, 60_000)
    if len(claimed) != LIMIT:
        report.violations.append(
            f"concurrency slots: a claim got {len(claimed)} of {len(probe)} fresh "
            f"'limited' jobs, expected exactly {LIMIT} (slots leaked or over-released)"
        )
    for h in probe:
        q.storage().cancel(h.id)
