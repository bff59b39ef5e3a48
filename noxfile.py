"""Development sessions: ``nox -s tests`` (the default), quick, contract, soak, fuzz,
chaos, lint, typecheck, bench, docs.

Every session runs in the *current* environment (``python=False``) with the interpreter
that runs nox itself (``sys.executable``), instead of building one virtualenv per session:
the test servers (PostgreSQL, Redis, moto) and drivers are heavy, CI already creates one
fresh venv per run (``.ci/run``), and reinstalling everything per session would double the
CI time for no isolation we need. Set it up once::

    python -m venv .venv && . .venv/bin/activate
    pip install -e ".[test,lint,docs,all,flows,dashboard]" nox
    nox -s tests            # what CI runs (bash .ci/run)
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
SHARED_BENCH = Path(
    os.environ.get("QC_SHARED_BENCH")
    or next(
        (p / "shared" / "bench" for p in ROOT.parents if (p / "shared" / "bench").is_dir()),
        ROOT.parent / "shared" / "bench",
    )
)
"""The shared peer harness: QC_SHARED_BENCH, else the nearest ``shared/bench`` above the
checkout (../shared/bench from /work/main, ../../shared/bench from a worktree)."""
PY = sys.executable

nox.options.sessions = ["tests"]
nox.options.error_on_missing_interpreters = True
nox.options.default_venv_backend = "none"  # every session runs in the current environment


class _NoUvProbeNoise(logging.Filter):
    """Drop nox's "uv binary not found." line.

    nox probes for uv before every session, even one with ``python=False`` that builds
    no virtualenv, and logs the miss at INFO; no session here uses uv, so the line only
    misleads (it reads like a missing dependency).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "uv binary not found."


logging.getLogger("nox").addFilter(_NoUvProbeNoise())

PYTEST_EXIT_MESSAGES = {
    1: "some tests failed",
    2: "pytest was interrupted or given bad arguments",
    3: "pytest hit an internal error",
    4: "pytest was given bad command-line options",
    5: "pytest collected NO tests (exit 5): the selection matched nothing, which is a failure",
}


def _require_installed(session: nox.Session) -> None:
    try:
        subprocess.run(
            [PY, "-c", "import queue_core, pytest"], check=True, capture_output=True, cwd=ROOT
        )
    except subprocess.CalledProcessError:
        session.error(
            f"{PY} cannot import queue_core and pytest: run nox from a venv where "
            "`pip install -e '.[test,lint,docs,all,flows,dashboard]' nox` was done "
            "(sessions reuse it)"
        )


def _pytest(session: nox.Session, *args: str) -> None:
    """Run pytest with this interpreter; a non-zero exit (5 included) fails the session."""
    _require_installed(session)
    cmd = [PY, "-m", "pytest", *args, *session.posargs]
    session.log(" ".join(cmd))
    code = subprocess.run(cmd, cwd=ROOT).returncode
    if code != 0:
        session.error(PYTEST_EXIT_MESSAGES.get(code, f"pytest exited with code {code}"))


@nox.session(python=False)
def tests(session: nox.Session) -> None:
    """The default test run: every test except the long ``soak`` and ``fuzz`` ones, in
    three pytest-xdist processes (each starts the servers it needs; ``-- -n 0`` runs
    them in this one): most tests wait for servers, worker processes and timeouts, so
    three processes on two cores take about 6 minutes where one takes 15."""
    _pytest(
        session, "-m", "not soak and not fuzz", "-q", "--durations=25", "-n", "3",
        "--dist", "worksteal",
    )  # fmt: skip


@nox.session(python=False)
def quick(session: nox.Session) -> None:
    """The inner loop: the unit tests and the contract suite on memory and SQLite, no
    server to start (about 40 s on two cores). Four pytest-xdist processes, each handed
    the next test when it is free (``worksteal``): most of these tests wait for real
    processes, timeouts and wake-ups, not for a core. ``pytest tests/unit`` alone needs
    only the base install (``pip install -e . pytest pytest-timeout hypothesis``)."""
    _pytest(
        session,
        "tests/unit",
        "tests/contract/test_memory.py",
        "tests/contract/test_sqlite.py",
        "-q",
        "-x",
        "-n",
        "4",
        "--dist",
        "worksteal",
    )


@nox.session(python=False)
def contract(session: nox.Session) -> None:
    """The published Storage contract suite against every backend (real servers)."""
    _pytest(session, "tests/contract", "-q")


@nox.session(python=False)
def soak(session: nox.Session) -> None:
    """Long soak tests (``-m soak``), including the bounded chaos drains that CI runs:
    1,000 jobs per backend (100 on SQS), and 30 flows + 30 durable workflows per backend
    (20 flows on SQS) under SIGKILLs and through one Redis and one PostgreSQL restart,
    unless ``QC_CHAOS_JOBS`` says otherwise."""
    _pytest(session, "-m", "soak", "-q")


@nox.session(python=False)
def fuzz(session: nox.Session) -> None:
    """Stored records fuzzed (``-m fuzz``, tests/fuzz/test_fuzz_records.py): random garbage
    in one field of one stored job on SQLite, PostgreSQL, Redis and DynamoDB (moto); the
    worker, the CLI, the dashboard and the Python API survive and only that job is
    affected. ``QC_FUZZ_RECORD_EXAMPLES`` examples per backend (10 by default: a few
    minutes; CI runs it after the soak session)."""
    _pytest(session, "-m", "fuzz", "-q")


@nox.session(python=False)
def chaos(session: nox.Session) -> None:
    """The full chaos drain (tests/chaos): 10,000 jobs per backend (500 on SQS), three
    workers, one SIGKILLed every few seconds; then 303 diamond flows and 303 durable
    workflows (steps, a sleep, an event wait, children; 60 flows on SQS) per backend the
    same way, and again through three Redis and three PostgreSQL restarts. Prints the
    table of jobs, kills, attempts lost and recovered, jobs run twice, jobs lost and the
    wait of a reaped job, and the table of flows and workflows (kills, restarts, attempts
    lost and suspended, bodies re-run, stuck, wrong ends). ``QC_CHAOS_JOBS=N nox -s
    chaos`` sets another size (``QC_CHAOS_FLOWS``, ``QC_CHAOS_WORKFLOWS``,
    ``QC_CHAOS_RESTARTS`` the others); ``nox -s chaos -- -k redis`` picks backends."""
    os.environ.setdefault("QC_CHAOS_JOBS", "10000")
    os.environ.setdefault("QC_CHAOS_RESTARTS", "3")
    _pytest(session, "tests/chaos", "-m", "chaos", "-q")


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    """ruff; the gates of ruff-gates.toml (complexity, format) and tools/check_sizes.py
    (file and function length), each with an allow-list of today's offenders that only
    shrinks; then the import-linter contracts of pyproject.toml."""
    session.run(PY, "-m", "ruff", "check", ".", external=True)
    gates = str(ROOT / "ruff-gates.toml")
    session.run(PY, "-m", "ruff", "check", "--config", gates, ".", external=True)
    session.run(PY, "-m", "ruff", "format", "--check", "--config", gates, ".", external=True)
    session.run(PY, str(ROOT / "tools" / "check_sizes.py"), external=True)
    lint_imports = Path(PY).with_name("lint-imports")
    session.run(str(lint_imports) if lint_imports.exists() else "lint-imports", external=True)


@nox.session(python=False)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the three installed packages."""
    session.run(PY, "-m", "mypy", "--strict", "queue_core", "backends", "contrib", external=True)


@nox.session(python=False)
def docs(session: nox.Session) -> None:
    """Check the docs (every public name rendered, every relative link resolves, every CLI
    command documented), then build the site with the generated API reference: ``mkdocs
    build --strict`` into a temporary directory, so any warning fails the session."""
    session.run(PY, str(ROOT / "docs" / "check.py"), external=True)
    with tempfile.TemporaryDirectory(prefix="queue-core-site-") as site:
        config = str(ROOT / "mkdocs.yml")
        build = ["build", "--strict", "--config-file", config, "--site-dir", site]
        session.run(PY, "-m", "mkdocs", *build, external=True)


# --------------------------------------------------------------------------- bench

_QC_ROWS = ("queue_core-sqlite", "queue_core-redis", "queue_core-postgresql")
_FIGURES = (
    ("enqueue", "enqueue single /s", True),
    ("enqueue_bulk", "enqueue bulk /s", True),
    ("drain_1w", "drain 1w /s", True),
    ("drain_2w", "drain 2w /s", True),
    ("lat_p50", "latency p50 ms", False),
    ("lat_p99", "latency p99 ms", False),
)


def _median(row: dict[str, object], key: str) -> float | None:
    summary = row.get("summary")
    if not isinstance(summary, dict):
        return None
    fig = summary.get(key)
    if isinstance(fig, dict) and isinstance(fig.get("median"), (int, float)):
        return float(fig["median"])
    return None


def _ratio_table(peers: list[dict[str, object]], ours: list[dict[str, object]]) -> str:
    """queue_core's medians against the best non-supplementary peer on the same backend.

    Ratios are "times better": rate / best rate, or best latency / latency.
    """
    lines = [f"{'backend':<11} {'figure':<18} {'queue_core':>11} {'best peer':>22} {'ratio':>6}"]
    for row in ours:
        backend = str(row.get("backend", "?"))
        same = [p for p in peers if p.get("backend") == backend and not p.get("supplementary")]
        for key, label, higher_is_better in _FIGURES:
            mine = _median(row, key)
            scored = [(v, str(p.get("label"))) for p in same if (v := _median(p, key)) is not None]
            if mine is None or not scored:
                continue
            best, who = max(scored) if higher_is_better else min(scored)
            ratio = mine / best if higher_is_better else best / mine
            peer = f"{who[:12]:>12} {best:>9,.1f}"
            lines.append(f"{backend:<11} {label:<18} {mine:>11,.1f} {peer} {ratio:>5.2f}x")
    return "\n".join(lines)


_BEST_PEERS = ("huey-redis", "huey-sqlite", "flexiq-sqlite", "flexiq-redis", "pgqueuer")
"""The best peer of each row of BENCH.md's targets; run beside queue-core by default."""

_LOCAL: dict[str, list[list[str]]] = {
    "drain.py": [["sqlite"], ["redis"], ["postgres"]],
    "isolation_overhead.py": [[]],
    "latency.py": [[]],
    "workflows.py": [["memory://"]],  # add a backend's URL when it gains SupportsWorkflows
}
"""In-repo benchmarks run by ``nox -s bench`` and their arguments (one run per list);
the others need a server of yours or run for minutes (see each script's docstring)."""

_HISTORY = ["sqlite", "postgres", "redis", "-n", "20000", "-k", "100000", "300000", "1000000"]
"""``bench/history_cost.py``'s arguments in ``nox -s bench``: what a kept history costs the
same 20,000-job drain after 100,000, 300,000 and 1,000,000 kept jobs (one growing history
per backend, 3 alternating repetitions at each point): about 20 minutes on a quiet 2-core
machine, most of it filling the histories."""

_HISTORY_QUICK = ["sqlite", "postgres", "redis", "-n", "5000", "-k", "50000", "--reps", "3"]
"""The same with ``--quick-history``: one 50,000-job point (a few minutes)."""


def _harness_copy() -> Path:
    """A writable copy of ../shared/bench (the driver writes its results beside itself)."""
    import shutil
    import stat

    dest = ROOT / ".bench" / "harness"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(SHARED_BENCH, dest, ignore=shutil.ignore_patterns("raw", "__pycache__"))
    for path in [dest, *dest.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return dest


@nox.session(python=False)
def bench(session: nox.Session) -> None:
    """In-repo benchmarks, then queue-core beside its peers in one run of the shared harness.

    ``nox -s bench`` runs the scripts of ``_LOCAL``, then (when the peer venvs exist, see
    ../shared/bench/setup.sh) the harness on a copy of ../shared/bench in ``.bench/``:
    the three queue-core rows and the best peers (``_BEST_PEERS``) in the same run, so
    the ratios compare figures measured minutes apart on the same machine. It prints the
    ratio table and writes it to ``.bench/RATIOS.md``. Options after ``--``:
    ``--all-peers`` (every system of the harness: a long run), ``--no-local``,
    ``--no-peers``, ``--no-history``, ``--quick-history``; anything else (e.g.
    ``--quick``) goes to run_all.py. Last, the history table (``bench/history_cost.py``,
    ``_HISTORY``, or ``_HISTORY_QUICK`` with ``--quick-history``): the same drain on a
    fresh store and after 100,000, 300,000 and 1,000,000 kept jobs, per backend, written
    to ``.bench/HISTORY.md``.
    """
    args = list(session.posargs)
    own = ("--all-peers", "--no-local", "--no-peers", "--no-history", "--quick-history")
    flags = {a for a in args if a in own}
    passthrough = [a for a in args if a not in flags]
    if "--no-local" not in flags:
        for name, runs in _LOCAL.items():
            for extra in runs:
                session.run(PY, str(ROOT / "bench" / name), *extra, external=True)
    if "--no-peers" not in flags:
        _peers(session, flags, passthrough)
    if "--no-history" not in flags:
        out = ROOT / ".bench" / "HISTORY.md"
        out.parent.mkdir(exist_ok=True)
        script = str(ROOT / "bench" / "history_cost.py")
        history = _HISTORY_QUICK if "--quick-history" in flags else _HISTORY
        session.run(PY, script, *history, "--out", str(out), external=True)
        session.log(f"wrote {out}")


def _peers(session: nox.Session, flags: set[str], passthrough: list[str]) -> None:
    """The shared harness: queue-core's rows and the best peers, and the ratio table."""
    env_root = Path(os.environ.get("BENCH_ENV_ROOT", Path.home() / ".cache" / "qc-bench"))
    if not (SHARED_BENCH / "run_all.py").exists():
        session.log(f"peer harness not found at {SHARED_BENCH}; skipping the peer comparison")
        return
    if not (env_root / "venv-queue_core" / "bin" / "python").exists():
        session.log(
            f"peer venvs not found under {env_root}. Create them (as root, once) with:\n"
            f"    BENCH_ENV_ROOT=/opt/qc-bench QUEUE_CORE_SRC={ROOT} bash "
            f"{SHARED_BENCH / 'setup.sh'}\n"
            "then rerun `nox -s bench` with the same BENCH_ENV_ROOT (its PostgreSQL cluster is "
            "owned by a `bench` user, who cannot enter /root: as root, ~/.cache fails)."
        )
        return
    harness = _harness_copy()
    only = [] if "--all-peers" in flags else ["--only", ",".join(_QC_ROWS + _BEST_PEERS)]
    session.run("python3", str(harness / "run_all.py"), *only, *passthrough, external=True)
    partial = only or "--quick" in passthrough
    result = harness / ("results.partial.json" if partial else "results.json")
    doc = json.loads(result.read_text())
    rows = [r for r in doc.get("systems", []) if "skipped" not in r]
    ours = [r for r in rows if r.get("label") in _QC_ROWS]
    peers = [r for r in rows if r.get("label") not in _QC_ROWS]
    table = _ratio_table(peers, ours)
    print(table)
    started = doc.get("meta", {}).get("started", "?")
    (ROOT / ".bench" / "RATIOS.md").write_text(
        f"queue-core vs the best peer, one harness run started {started}\n\n```\n{table}\n```\n"
    )
    session.log(f"wrote {ROOT / '.bench' / 'RATIOS.md'} and {harness}/RESULTS*.md")
