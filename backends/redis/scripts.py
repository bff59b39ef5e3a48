"""The Lua scripts of the Redis backend: their sources and the lean EVALSHA call.

Every script of ``lua/`` is run with ``_lib.lua`` prepended (and ``_flow.lua`` for the
``flow_*`` scripts; a script of :data:`PRELUDES` with its shorter prelude instead), and a
``-- #include <file>`` line stands for the text of ``lua/<file>.lua``; :func:`load_script`
builds that text, :func:`sources` the texts of every script
:class:`~backends.redis.RedisStorage` registers. :func:`eval_once` is the hot paths'
call: one pre-packed ``EVALSHA`` on a pooled connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from redis.exceptions import NoScriptError

__all__ = ["PRELUDES", "SCRIPTS", "eval_once", "load_script", "lua_text", "opt", "sources"]

SCRIPTS = (
    "enqueue",
    "claim",
    "renew",
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
)
"""The scripts registered when a storage is built (``enqueue_plain`` and
``schedule_tick`` are registered on first use)."""

# redis-py packs with hiredis when it is installed; the hot paths call it directly
_hiredis_pack: Any = None
try:
    from hiredis import pack_command

    _hiredis_pack = pack_command
except ImportError:  # pragma: no cover - hiredis is an optional speed-up
    pass


def opt(value: int | str | None) -> str | int:
    """An optional argument of a script: ``''`` for ``None`` (what the scripts test)."""
    return "" if value is None else value


def eval_once(conn: Any, script: Any, args: Sequence[Any]) -> Any:
    """EVALSHA on one pooled connection; on NOSCRIPT load the script and run it again."""
    if _hiredis_pack is not None:
        conn.send_packed_command([_hiredis_pack(("EVALSHA", script.sha, 0, *args))])
    else:
        conn.send_command("EVALSHA", script.sha, 0, *args)
    try:
        return conn.read_response()
    except NoScriptError:
        conn.send_command("SCRIPT", "LOAD", script.script)
        sha = conn.read_response()
        script.sha = sha.decode() if isinstance(sha, bytes) else sha
        conn.send_command("EVALSHA", script.sha, 0, *args)
        return conn.read_response()


_LUA = Path(__file__).parent / "lua"  # not importlib.resources: slow to import
_INCLUDE = "-- #include "


def lua_text(name: str) -> str:
    """``lua/<name>.lua`` with each ``-- #include <file>`` line replaced by the text of
    ``lua/<file>.lua``: a piece of code two scripts share, inlined (as a function it
    would cost each call its closure)."""
    text = _LUA.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    if _INCLUDE not in text:
        return text
    lines = text.splitlines(keepends=True)
    for k, line in enumerate(lines):
        head, _, included = line.partition(_INCLUDE)
        if included and not head.strip():
            lines[k] = lua_text(included.strip())
    return "".join(lines)


PRELUDES = {"enqueue_plain": "_base", "enqueue_one": "_now", "claim": "_claim"}
"""Scripts run with a prelude shorter than ``_lib.lua``: each call builds every closure
of its prelude again (``_lib.lua`` ~30 of them: ~10 µs of server time per call, measured
in docs/backends/redis.md), so the single-enqueue hot path takes only ``_base.lua`` and
the claim ``_claim.lua`` (``_base.lua`` and the pieces of ``_lib.lua`` it uses); the
single-job enqueue ``enqueue_one.lua`` only ``_now.lua`` (the prefix, ``NOW`` and the
retention: no closure at all)."""


def load_script(name: str) -> str:
    """The text of script ``name``: ``_lib.lua`` (its :data:`PRELUDES` entry if it has
    one; and ``_flow.lua`` for a ``flow_`` script) followed by ``<name>.lua``, includes
    expanded (:func:`lua_text`)."""
    lib = lua_text(PRELUDES.get(name, "_lib"))
    if name.startswith("flow_"):
        lib += "\n" + lua_text("_flow")
    return lib + "\n" + lua_text(name)


_SOURCES: dict[str, str] = {}


def sources() -> dict[str, str]:
    """The text of every script of :data:`SCRIPTS`, read once per process."""
    if not _SOURCES:
        _SOURCES.update({name: load_script(name) for name in SCRIPTS})
    return _SOURCES
