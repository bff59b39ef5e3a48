"""The worker is parts that hold each other (issue 22): few queue-core classes in
``Worker``'s MRO, no import cycle among its modules (imports inside functions and under
``TYPE_CHECKING`` included), and worker code that reads time only through a clock."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

from queue_core import Queue
from queue_core.worker import Worker

WORKER = Path(__file__).resolve().parents[3] / "queue_core" / "worker"

_TIME_READS = {"monotonic", "monotonic_ns", "time", "time_ns", "perf_counter", "perf_counter_ns"}
_OWN_CLOCK = {
    # runs in the child process, where the worker's clock does not reach
    "process/child.py": {"monotonic"},
    # a log record's own stamp, read as logging.LogRecord reads it (the machine's time)
    "log.py": {"time"},
}


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(WORKER.rglob("*.py")):
        parts = ["queue_core", "worker", *path.relative_to(WORKER).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = ast.parse(path.read_text(encoding="utf-8"))
    return out


def test_the_worker_is_composed_of_parts_not_a_mixin_tower() -> None:
    owned = [k for k in Worker.__mro__ if k.__module__.startswith("queue_core")]
    assert len(owned) <= 3, owned
    queue = Queue("memory://")
    try:
        queue.task(name="one")(lambda: 1).delay()
        worker = Worker(queue, burst=True, install_signal_handlers=False)
        worker.run()
    finally:
        queue.close()
    parts = worker._parts
    assert parts is not None and worker.stats()["processed"] == 1
    # one recorder, one shared state, held by the parts that use them
    assert parts.claims.runner is parts.runner
    assert parts.runner.recorder is parts.recorder is parts.watchdog.recorder
    assert parts.finisher.recorder is parts.recorder
    assert parts.claims.run is parts.runner.run is parts.finisher.run is worker._state
    assert parts.runner.timing is parts.claims.timing is parts.renewer.timing is worker._timing


def test_no_import_cycle_among_the_worker_modules() -> None:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, tree in modules.items():
        for node in ast.walk(tree):  # function-level and TYPE_CHECKING imports count
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    graphlib.TopologicalSorter(graph).prepare()  # CycleError names a cycle


def test_worker_code_reads_time_only_through_a_clock() -> None:
    reads = []
    for path in sorted(WORKER.rglob("*.py")):
        rel = path.relative_to(WORKER).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "time"
                and node.func.attr in _TIME_READS
                and node.func.attr not in _OWN_CLOCK.get(rel, set())
            ):
                reads.append(f"{rel}:{node.lineno} time.{node.func.attr}()")
    assert reads == []
