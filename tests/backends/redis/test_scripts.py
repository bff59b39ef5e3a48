"""Loading the Lua scripts (backends/redis/scripts.py): ``-- #include`` lines are
replaced by the shared piece they name, so enqueue.lua and enqueue_plain.lua run the
same duplicate check and once-per-batch writes."""

from __future__ import annotations

import re
from pathlib import Path

from backends.redis.scripts import SCRIPTS, load_script, lua_text

LUA = Path(__file__).resolve().parents[3] / "backends" / "redis" / "lua"


def _directives(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip().startswith("-- #include ")]


def test_no_loaded_script_keeps_an_include_line() -> None:
    for name in (*SCRIPTS, "enqueue_plain", "enqueue_one", "schedule_tick"):
        assert _directives(load_script(name)) == [], name


def test_both_enqueue_scripts_carry_each_shared_piece_once() -> None:
    pieces = ("_enqueue_dup", "_enqueue_queued", "_enqueue_flush")
    for name in ("enqueue", "enqueue_plain"):
        raw = (LUA / f"{name}.lua").read_text(encoding="utf-8")
        assert [d.strip() for d in _directives(raw)] == [f"-- #include {p}" for p in pieces]
        loaded = load_script(name)
        for piece in pieces:
            assert loaded.count(lua_text(piece)) == 1, (name, piece)


def test_enqueue_plain_runs_with_the_base_prelude_and_the_others_with_all_of_lib() -> None:
    base, lib = lua_text("_base"), lua_text("_lib")
    assert lib.count(base) == 1 and len(lib) > 2 * len(base)  # _lib.lua includes _base.lua
    plain = load_script("enqueue_plain")
    assert plain.startswith(base) and lib not in plain
    assert "local function dead_letter" not in plain
    for name in SCRIPTS:
        if name != "claim":
            assert load_script(name).startswith(lib), name


def test_claim_runs_with_the_claim_prelude_which_defines_every_function_it_calls() -> None:
    claim, lib = load_script("claim"), lua_text("_lib")
    assert claim.startswith(lua_text("_claim")) and lib not in claim
    assert "local function dead_letter" not in claim
    defined = set(re.findall(r"local function (\w+)", claim))
    body = lua_text("claim")
    every = set(re.findall(r"local function (\w+)", lib))
    called = {f for f in every if re.search(rf"\b{f}\(", body)}
    assert called and called <= defined, called - defined


def test_enqueue_one_runs_with_the_now_prelude_alone() -> None:
    now, base = lua_text("_now"), lua_text("_base")
    assert base.count(now) == 1  # _base.lua includes _now.lua
    one = load_script("enqueue_one")
    assert one.startswith(now) and base not in one
    assert "local function" not in one  # no closure built per call
