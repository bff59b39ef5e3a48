"""Loading the Lua scripts (backends/redis/scripts.py): ``-- #include`` lines are
replaced by the shared piece they name, so enqueue.lua and enqueue_plain.lua run the
same duplicate check and once-per-batch writes; and the packer that sends them when
hiredis is not installed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from redis._parsers.encoders import Encoder
from redis.connection import PythonRespSerializer

from backends.redis import RedisStorage, scripts
from backends.redis.scripts import PRELUDES, SCRIPTS, load_script, lua_text, pack_command
from queue_core.records.jobs import JobState
from queue_core.rules.limits import RATE_START_MS
from queue_core.rules.outcomes import MAX_HELD_REFUNDS
from queue_core.testing.fixtures import LEASE, T0, complete_end, new_job

LUA = Path(__file__).resolve().parents[3] / "backends" / "redis" / "lua"


def _directives(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip().startswith("-- #include ")]


def test_no_loaded_script_keeps_an_include_line() -> None:
    for name in (
        *SCRIPTS,
        "enqueue_plain",
        "enqueue_one",
        "schedule_tick",
        "progress",
        "resume",
        "rr_keys",
    ):
        for cluster in (False, True):
            text = load_script(name, cluster)
            assert _directives(text) == [], name
            assert "-- #cluster " not in text, name


def test_a_cluster_draws_sequence_numbers_from_the_clock_and_a_server_from_p_seq() -> None:
    """On a Redis Cluster every draw of P:seq goes through tseq (numbers of two homes
    compare in storing order); a standalone server's scripts keep their INCRs, with no
    cluster piece in them."""
    for name in (*SCRIPTS, "enqueue_plain", "enqueue_one"):
        alone, cluster = load_script(name), load_script(name, True)
        assert "tseq" not in alone and "P:g:" not in alone, name
        assert "local function tseq" in cluster, name
        draws = [m for m in re.findall(r"redis\.call\('INCR(?:BY)?', ([^,)]*)", cluster)]
        assert not [d for d in draws if "seq'" in d and "dseq" not in d and "xseq" not in d]
        assert "SEQ" not in draws, name
        assert alone.count("tseq(") == 0
    uses = sum(
        load_script(n, True).count("tseq(") for n in ("enqueue", "enqueue_one", "enqueue_plain")
    )
    assert uses >= 6  # the definition and the draws of the three enqueue scripts
    assert "EXISTS', P .. ':g:'" in load_script("claim", True)
    assert "':g:'" not in load_script("claim")


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
        if name not in PRELUDES:
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


def test_the_claim_script_keeps_the_rules_rate_start() -> None:
    """claim.lua mirrors queue_core.rules.limits.rate_grant with its own copy of
    RATE_START_MS (a claim's start_by is NOW plus it): the copy is the rule's value."""
    found = re.findall(r"^local RATE_START_MS = (\d+)$", lua_text("claim"), re.M)
    assert found == [str(RATE_START_MS)]


ARGS = [
    ("EVALSHA", "0" * 40, 0, "qc:", "", 604_800_000, "01JOBID", "bench.noop"),
    ("x", b"\x00\xff\r\n", -7, 2.5, 1e-300, "héllo ✓", b"", 0),
    (b"PING",),
]


@pytest.mark.parametrize("args", ARGS)
def test_pack_command_writes_what_redis_py_writes(args: tuple[object, ...]) -> None:
    # the hot paths' packer without hiredis: byte for byte what redis-py's own sends
    ours = pack_command(args)  # type: ignore[arg-type]
    assert ours == b"".join(
        PythonRespSerializer(6000, Encoder("utf-8", "strict", False).encode).pack(*args)
    )


@pytest.mark.parametrize("bad", [True, None, [1]])
def test_pack_command_refuses_what_redis_py_refuses(bad: object) -> None:
    with pytest.raises(TypeError, match="bytes, str, int or float"):
        pack_command(("SET", "k", bad))  # type: ignore[arg-type]


def test_the_storage_runs_its_scripts_packed_without_hiredis(
    storage: RedisStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scripts, "_pack", pack_command)  # as when hiredis is not installed
    job = new_job(id="j1", payload=b"\x00\xff")
    storage.enqueue([job], now=T0)
    (claimed,) = storage.claim("w", ["default"], 1, LEASE, now=T0 + 1)
    assert (claimed.id, claimed.payload) == ("j1", b"\x00\xff")
    assert storage.finish([complete_end(claimed.ref, b"ok")], now=T0 + 2) == [True]
    done = storage.get_job("j1")
    assert done is not None and done.state is JobState.SUCCEEDED


def test_reap_lua_mirrors_the_held_refund_bound() -> None:
    """reap.lua gives a held attempt back unspent while the job had fewer than
    MAX_HELD_REFUNDS such refunds: the copy is the rule's value."""
    found = re.findall(r"^local MAX_HELD_REFUNDS = (\d+)$", lua_text("reap"), re.M)
    assert found == [str(MAX_HELD_REFUNDS)]
