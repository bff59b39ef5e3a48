"""CPU of the SQL backend's side of a 1,000-step fan-out/fan-in, without a worker.

One thread claims up to 64 step jobs and finishes them in one ``finish`` batch until the
execution has succeeded (``root`` -> 998 steps -> ``join``): the storage calls a worker
makes for ``bench/flows_fanout.py``'s flow, without running bodies. Prints the process
CPU and wall time of the loop. With ``--roots A,B`` each checkout runs in its own
process, alternated ``--reps`` times (A/B/A/B), so load drift on a shared machine cancels;
PostgreSQL runs on a throwaway server (``tests/servers/postgres.py``)::

    python bench/sql_fanout_cpu.py sqlite [--reps 3] [--roots DIR,DIR]
    python bench/sql_fanout_cpu.py postgres
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from backends.sql import SQLStorage
from queue_core.testing import SEC, T0
from queue_core.testing.fixtures import complete_end
from queue_core.testing.suite._flows_base import make_execution, make_spec

storage = SQLStorage(sys.argv[2])
graph = {"root": []}
mids = [f"s{i}" for i in range(998)]
graph.update({m: ["root"] for m in mids})
graph["join"] = mids
new = make_execution(make_spec(graph))
storage.start_execution(new, now=T0)
c0, t0, t = time.process_time(), time.perf_counter(), T0 + SEC
while got := storage.claim("w", ["default"], 64, 60_000, now=t):
    t += 1
    assert storage.finish([complete_end(c.ref) for c in got], now=t) == [True] * len(got)
cpu, wall = time.process_time() - c0, time.perf_counter() - t0
assert storage.get_execution(new.id).state.value == "succeeded"
storage.close()
print(cpu, wall)
"""


def _once(root: str, url: str) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, root, url],
        cwd=root,
        env=dict(os.environ, PYTHONPATH=root),
        capture_output=True,
        text=True,
        check=True,
    )
    cpu, wall = out.stdout.split()
    return float(cpu), float(wall)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("backend", choices=("sqlite", "postgres"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--roots", default=str(ROOT), help="comma-separated checkouts to alternate")
    a = ap.parse_args()
    roots = a.roots.split(",")
    cpu: dict[str, list[float]] = {r: [] for r in roots}
    wall: dict[str, list[float]] = {r: [] for r in roots}
    with tempfile.TemporaryDirectory(prefix="qc-fan-") as tmp:
        server = None
        if a.backend == "postgres":
            sys.path.insert(0, str(ROOT))
            from tests.servers.postgres import PostgresServer

            server = PostgresServer()
            server.start()
        try:
            for _ in range(a.reps):
                for root in roots:
                    name = "f" + uuid.uuid4().hex[:8]
                    if server is not None:
                        server.create_database(name)
                        url = server.url(name)
                    else:
                        url = f"sqlite:///{Path(tmp) / (name + '.db')}"
                    c, w = _once(root, url)
                    cpu[root].append(c)
                    wall[root].append(w)
        finally:
            if server is not None:
                server.stop()
    print(f"{a.backend}: 1,000-step fan-out, storage calls only, median of {a.reps} (min-max)")
    for root in roots:
        cs, ws = cpu[root], wall[root]
        print(
            f"  cpu {statistics.median(cs) * 1e3:6.0f} ms ({min(cs) * 1e3:.0f}-{max(cs) * 1e3:.0f})"
            f"  wall {statistics.median(ws) * 1e3:6.0f} ms  {root}"
        )


if __name__ == "__main__":
    main()
