"""The Lua scripts of the Redis backend: their sources and the lean EVALSHA call.

Every script of ``lua/`` is run with ``_lib.lua`` prepended (and ``_flow.lua`` for the
``flow_*`` scripts; a script of :data:`PRELUDES` with its shorter prelude instead), and a
``-- #include <file>`` line stands for the text of ``lua/<file>.lua``; :func:`load_script`
builds that text, which the store (:class:`~backends.redis.store.RedisStore`) registers the
first time a part asks for the script. :func:`eval_once` is the hot paths' call: one
pre-packed ``EVALSHA`` on a pooled connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from redis.exceptions import NoScriptError

__all__ = [
    "PRELUDES",
    "SCRIPTS",
    "cluster_text",
    "eval_once",
    "load_script",
    "lua_text",
    "pack_command",
]

SCRIPTS = (
    "enqueue",
    "claim",
    "renew",
    "start",
    "heartbeat",
    "finish",
    "reap",
    "cancel",
    "retry_dead",
    "purge_dead",
    "prune",
    "list_dead",
    "stats",
    "count_pending",
    "next_ready",
    "list_jobs",
    "flow_start",
    "flow_apply",
    "peek",
    "dead_take",
    "dead_drop",
    "corrupt",
    "flow_send",
)
"""The scripts run by name with all of ``_lib.lua`` before them; ``enqueue_plain``,
``enqueue_one`` and ``claim`` run with a shorter one (:data:`PRELUDES`), ``schedule_tick``
joined to ``enqueue`` (``backends/redis/schedules.py``)."""


def pack_command(args: Sequence[bytes | str | int | float]) -> bytes:
    """``args`` as one RESP command (an array of bulk strings), as redis-py's own packer
    writes it (text in UTF-8, numbers in decimal, a float as ``repr``) in a third of its
    time: the scripts' arguments are only these types, so the hot paths need none of its
    checks. hiredis's ``pack_command`` replaces it when installed (the ``redis`` extra)."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        if type(a) is str:
            b = a.encode()
        elif type(a) is int:  # not a bool: redis-py refuses those too
            b = b"%d" % a
        elif type(a) is bytes:
            b = a
        elif type(a) is float:
            b = repr(a).encode()
        else:
            raise TypeError(f"cannot send {a!r} to Redis: bytes, str, int or float")
        parts += (b"$%d\r\n" % len(b), b, b"\r\n")
    return b"".join(parts)


_pack: Any = pack_command
try:
    from hiredis import pack_command as _hiredis_pack

    _pack = _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is an optional speed-up
    pass


def eval_once(conn: Any, script: Any, args: Sequence[Any], keys: Sequence[str] = ()) -> Any:
    """EVALSHA on one pooled connection, packed by :func:`pack_command` (or hiredis); on
    NOSCRIPT load the script and run it again. ``keys`` are named in ``KEYS`` (a cluster
    node answers ``MOVED`` for a key of a slot it does not own, before running anything)."""
    conn.send_packed_command([_pack(("EVALSHA", script.sha, len(keys), *keys, *args))])
    try:
        return conn.read_response()
    except NoScriptError:
        conn.send_command("SCRIPT", "LOAD", script.script)
        sha = conn.read_response()
        script.sha = sha.decode() if isinstance(sha, bytes) else sha
        conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
        return conn.read_response()


_LUA = Path(__file__).parent / "lua"  # not importlib.resources: slow to import
_INCLUDE = "-- #include "
_CLUSTER = "-- #cluster "
_SEQ_DRAWS = (
    ("redis.call('INCR', P .. ':seq')", "tseq(1)"),
    ("redis.call('INCR', SEQ)", "tseq(1)"),
    ("redis.call('INCRBY', SEQ, n)", "tseq(n)"),
)
"""What a script on a Redis Cluster draws from ``P:seq`` instead (``lua/_tseq.lua``)."""


def lua_text(name: str, cluster: bool = False) -> str:
    """``lua/<name>.lua`` with each ``-- #include <file>`` line replaced by the text of
    ``lua/<file>.lua``: a piece of code two scripts share, inlined (as a function it
    would cost each call its closure). A ``-- #cluster <file>`` line is included the same
    way on a Redis Cluster (``cluster``) and dropped otherwise."""
    text = _LUA.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    if _INCLUDE not in text and _CLUSTER not in text:
        return text
    lines = text.splitlines(keepends=True)
    for k, line in enumerate(lines):
        head, _, included = line.partition(_INCLUDE)
        if included and not head.strip():
            lines[k] = lua_text(included.strip(), cluster)
            continue
        head, _, included = line.partition(_CLUSTER)
        if included and not head.strip():
            lines[k] = lua_text(included.strip(), cluster) if cluster else ""
    return "".join(lines)


def cluster_text(text: str) -> str:
    """``text`` as it runs on a Redis Cluster: every draw of ``P:seq`` becomes ``tseq(n)``
    (``lua/_tseq.lua``: numbers that follow the server's clock, so that those of two
    homes compare in the order the jobs were stored)."""
    for old, new in _SEQ_DRAWS:
        text = text.replace(old, new)
    return text


PRELUDES = {
    "enqueue_plain": "_base",
    "enqueue_one": "_now",
    "claim": "_claim",
    "peek": "_base",
    "progress": "_now",
    "resume": "_base",
    "rr_keys": "_base",
}
"""Scripts run with a prelude shorter than ``_lib.lua``: each call builds every closure
of its prelude again (``_lib.lua`` ~30 of them: ~10 µs of server time per call, measured
in docs/backends/redis.md), so the single-enqueue hot path takes only ``_base.lua`` and
the claim ``_claim.lua`` (``_base.lua`` and the pieces of ``_lib.lua`` it uses); the
single-job enqueue ``enqueue_one.lua`` and the progress report ``progress.lua`` only
``_now.lua`` (the prefix, ``NOW`` and the retention: no closure at all); ``resume.lua``
and ``rr_keys.lua`` need only ``_base.lua``."""


def load_script(name: str, cluster: bool = False) -> str:
    """The text of script ``name``: ``_lib.lua`` (its :data:`PRELUDES` entry if it has
    one; and ``_flow.lua`` for a ``flow_`` script) followed by ``<name>.lua``, includes
    expanded (:func:`lua_text`); on a Redis Cluster (``cluster``) with its cluster parts
    and sequence draws (:func:`cluster_text`)."""
    lib = lua_text(PRELUDES.get(name, "_lib"), cluster)
    if name.startswith("flow_"):
        lib += "\n" + lua_text("_flow", cluster)
    text = lib + "\n" + lua_text(name, cluster)
    return cluster_text(text) if cluster else text
