"""Server time of the Redis enqueue scripts, per call, compared between checkouts.

The Lua text of ``enqueue``, ``enqueue_plain`` and ``enqueue_one`` is taken from each tree
of ``--roots`` (as that tree's ``backends.redis.scripts.load_script`` builds it) and the
variants are
registered on one redis-server started here. The storage of this tree then enqueues
through them in turn, call by call (A B, B A, A B, ...), so load drift on a shared machine
hits both alike; the arguments are this tree's (the scripts of the trees compared must
take the same ones). Each call's server time comes from ``SLOWLOG`` (threshold 0,
microseconds, the script's own commands included), told apart by the script's SHA.
Four figures: plain jobs one per call (``enqueue_one.lua``) and 1,000 per call
(``enqueue_plain.lua``), jobs
with a heartbeat (so ``enqueue.lua``) one per call and 1,000 per call. Prints the median
server µs per job of each figure and tree::

    python bench/redis_enqueue_lua.py [--calls 2000] [--roots DIR,DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends.redis import RedisStorage  # noqa: E402
from queue_core.records.jobs import NewJob  # noqa: E402
from tests.servers.redis import start_redis_server, stop_redis_server  # noqa: E402

_LOAD = "import sys; from backends.redis.scripts import load_script as f; print(f(sys.argv[1]))"
PAYLOAD = b'{"args":[1],"kwargs":{}}'


def lua_of(root: str, name: str) -> str:
    """Script ``name`` as the tree ``root`` loads it."""
    env = dict(os.environ, PYTHONPATH=root)
    cmd = [sys.executable, "-c", _LOAD, name]
    return subprocess.run(cmd, env=env, cwd=root, capture_output=True, check=True, text=True).stdout


def _jobs(n: int, hb: int | None) -> list[NewJob]:
    return [
        NewJob(id=uuid.uuid4().hex, task_name="noop", queue="q", payload=PAYLOAD, heartbeat_ms=hb)
        for _ in range(n)
    ]


def figure(
    s: RedisStorage, scripts: list[Any], hb: int | None, batch: int, calls: int
) -> list[float]:
    """Median server µs per job of each script in ``scripts``, called in turn."""
    attr = "_full" if hb is not None else "_one" if batch == 1 else "_plain"
    r = s.store.client
    by_sha: dict[str, list[float]] = {sc.sha: [] for sc in scripts}
    for i in range(calls):
        r.slowlog_reset()
        for script in scripts if i % 2 == 0 else scripts[::-1]:  # A B, B A: no place favoured
            setattr(s.enqueuing, attr, script)
            s.enqueue(_jobs(batch, hb))
        # the log holds the commands the scripts call too: read it after every round
        for entry in r.slowlog_get(-1):
            args = entry["command"].split(b" ", 2)
            if args[0].upper() == b"EVALSHA" and args[1].decode() in by_sha:
                by_sha[args[1].decode()].append(entry["duration"] / batch)
    assert all(len(v) == calls for v in by_sha.values()), {k: len(v) for k, v in by_sha.items()}
    return [statistics.median(by_sha[sc.sha]) for sc in scripts]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000, help="single calls per tree")
    ap.add_argument("--roots", default=str(ROOT))
    a = ap.parse_args()
    roots = [str(Path(x).resolve()) for x in a.roots.split(",")]
    server = start_redis_server()
    try:
        s = RedisStorage.from_url(server.url(prefix="bench"))
        r = s.store.client
        r.config_set("slowlog-log-slower-than", 0)
        r.config_set("slowlog-max-len", 10_000)
        plain = [r.register_script(lua_of(root, "enqueue_plain")) for root in roots]
        one = [r.register_script(lua_of(root, "enqueue_one")) for root in roots]
        full = [r.register_script(lua_of(root, "enqueue")) for root in roots]
        for script in plain + one + full:
            r.script_load(script.script)
        rows = {
            "plain single": figure(s, one, None, 1, a.calls),
            "plain bulk": figure(s, plain, None, 1000, max(a.calls // 100, 5)),
            "full single": figure(s, full, 10_000, 1, a.calls),
            "full bulk": figure(s, full, 10_000, 1000, max(a.calls // 100, 5)),
        }
        s.close()
    finally:
        stop_redis_server(server)
    print("server µs per job (median over calls; SLOWLOG durations)")
    for k, root in enumerate(roots):
        print(f"{root}: " + ", ".join(f"{name} {v[k]:.2f}" for name, v in rows.items()))


if __name__ == "__main__":
    main()
