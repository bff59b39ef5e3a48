"""Serializers: round trips, the JSON envelope, and errors that name the bad argument."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queue_core.app.serializer import (
    JsonSerializer,
    PickleSerializer,
    Serializer,
    get_serializer,
)
from queue_core.records.errors import ConfigError, SerializationError
from queue_core.records.jobs import DeadJob, decode_json_payload

FAST = settings(max_examples=200, deadline=None)
JSON = JsonSerializer()
PICKLE = PickleSerializer()

# Sizes are bounded (strings, leaves, kwargs): unbounded, drawing one example took up to
# half a second (50 s per 200-example test on a loaded 2-core machine); a round trip is
# as strong on 10 leaves and 5 arguments as on 50.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=10,
)


# ------------------------------------------------------------------ JSON


def test_payload_is_the_compact_envelope() -> None:
    data = JSON.dumps_payload((42, "a@example.com"), {"flag": True, "é": None})
    assert data == '{"args":[42,"a@example.com"],"kwargs":{"flag":true,"é":null}}'.encode()
    assert data[:1] == b"{"


def test_empty_payload() -> None:
    assert JSON.dumps_payload((), {}) == b'{"args":[],"kwargs":{}}'
    assert JSON.loads_payload(b'{"args":[],"kwargs":{}}') == ((), {})


def test_tuples_become_lists() -> None:
    data = JSON.dumps_payload(((1, 2),), {"t": (3,)})
    assert JSON.loads_payload(data) == (([1, 2],), {"t": [3]})


def test_dead_letter_decoding_reads_the_payload() -> None:
    data = JSON.dumps_payload((1, "x"), {"k": [1]})
    assert decode_json_payload(data) == ((1, "x"), {"k": [1]})
    entry = DeadJob.build(
        id="d1", job_id="j1", task_name="t", queue="q", payload=data, error=None,
        error_class=None, reason="fatal", attempts=[], dead_at_ms=0,
    )
    assert (entry.args, entry.kwargs) == ((1, "x"), {"k": [1]})


def test_a_payload_nested_too_deeply_keeps_its_dead_letter_listable() -> None:
    """A stored payload deeper than the JSON decoder's recursion limit decodes as no
    arguments (the raw bytes stay on the entry) instead of raising RecursionError out of
    every listing holding it."""
    deep = b'{"args": [' + b"[" * 100_000 + b"]" * 100_000 + b'], "kwargs": {}}'
    assert decode_json_payload(deep) == ((), {})
    entry = DeadJob.build(
        id="d1", job_id="j1", task_name="t", queue="q", payload=deep, error=None,
        error_class=None, reason="bad_payload", attempts=[], dead_at_ms=0,
    )
    assert (entry.args, entry.kwargs, entry.payload) == ((), {}, deep)


@FAST
@given(
    args=st.lists(json_values, max_size=5),
    kwargs=st.dictionaries(st.text(max_size=16), json_values, max_size=5),
)
def test_json_payload_round_trip(args: list[Any], kwargs: dict[str, Any]) -> None:
    data = JSON.dumps_payload(tuple(args), kwargs)
    assert isinstance(data, bytes) and data[:1] == b"{"
    assert JSON.loads_payload(data) == (tuple(args), kwargs)
    assert json.loads(data) == {"args": args, "kwargs": kwargs}


@FAST
@given(value=json_values)
def test_json_result_round_trip(value: Any) -> None:
    assert JSON.loads_result(JSON.dumps_result(value)) == value


@pytest.mark.parametrize(
    "value", [None, 0, 7, -7, 2**63, -(2**70), True, False, 1.0, "7", [7], {"a": None}]
)
def test_json_result_bytes_are_the_encoders_with_or_without_the_fast_path(value: Any) -> None:
    # None and plain ints skip the encoder: the same bytes, and bool stays true/false
    assert JSON.dumps_result(value) == json.dumps(value, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    "data",
    [
        b'{"args":[0],"kwargs":{}}',
        b'{"args":[-0],"kwargs":{}}',
        b'{"args":[-123],"kwargs":{}}',
        b'{"args":[999999999999999999],"kwargs":{}}',
        b'{"args":[' + b"9" * 40 + b'],"kwargs":{}}',
        b'{"args":[1],"kwargs":{}} ',
        b'{"args": [1], "kwargs": {}}',
        b'{"args":[1.5],"kwargs":{}}',
        b'{"args":[true],"kwargs":{}}',
    ],
)
def test_one_int_payloads_decode_as_json_does(data: bytes) -> None:
    obj = json.loads(data)
    assert JSON.loads_payload(data) == (tuple(obj["args"]), obj["kwargs"])
    assert type(JSON.loads_payload(data)[0][0]) is type(obj["args"][0])


@pytest.mark.parametrize("data", [b'{"args":[01],"kwargs":{}}', b'{"args":[1],"kwargs":{}}x'])
def test_one_int_lookalikes_that_are_not_json_raise(data: bytes) -> None:
    with pytest.raises(SerializationError):
        JSON.loads_payload(data)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -math.inf])
def test_nan_and_infinities_are_refused_not_written(value: float) -> None:
    # json.dumps would write NaN/Infinity, which is not JSON: other readers reject it.
    with pytest.raises(SerializationError, match=r"args\[1\]\['x'\] is .*cannot represent"):
        JSON.dumps_payload((1, {"x": value}), {})
    with pytest.raises(SerializationError, match=r"kwargs\['v'\]\[0\] is"):
        JSON.dumps_payload((), {"v": [value]})
    with pytest.raises(SerializationError, match=r"result value\[2\] is"):
        JSON.dumps_result([1, 2, value])


@pytest.mark.parametrize("key", [1, 1.5, True, None])
def test_dicts_with_non_string_keys_are_refused_not_changed(key: object) -> None:
    # {1: "a"} would arrive as {"1": "a"}: refused, naming where the key is.
    with pytest.raises(SerializationError) as info:
        JSON.dumps_payload(("x", [{"ok": {key: "a"}}]), {})
    message = str(info.value)
    assert f"args[1][0]['ok'] key {key!r}" in message and "is not a string" in message
    with pytest.raises(SerializationError, match=r"kwargs\['d'\] key"):
        JSON.dumps_payload((), {"d": {key: 1}})
    with pytest.raises(SerializationError, match="result value key"):
        JSON.dumps_result({key: 1})


def test_strings_with_braces_and_string_keyed_dicts_still_pass() -> None:
    data = JSON.dumps_payload(("{1: 'a'}", {"k": {"n": [1.5, "}"]}}), {"s": "{"})
    assert JSON.loads_payload(data) == (("{1: 'a'}", {"k": {"n": [1.5, "}"]}}), {"s": "{"})


@pytest.mark.parametrize(
    ("args", "kwargs", "fragments"),
    [
        ((1, {1, 2}), {}, ["args[1]", "'set'"]),
        (({1, 2},), {}, ["args[0]", "'set'"]),
        ((), {"to": object()}, ["kwargs['to']", "'object'"]),
        ((), {"to": {"x": [1, b"raw"]}}, ["kwargs['to']['x'][1]", "'bytes'"]),
        ((Decimal("1.5"),), {}, ["args[0]", "'Decimal'"]),
        (([{"a": 1}, {"b": 2j}],), {}, ["args[0][1]['b']", "'complex'"]),
        (({(1, 2): "v"},), {}, ["args[0]", "(1, 2)", "'tuple'"]),
        ((1,), {"f": print}, ["kwargs['f']", "'builtin_function_or_method'"]),
    ],
)
def test_json_payload_errors_name_the_argument_and_type(
    args: tuple[Any, ...], kwargs: dict[str, Any], fragments: list[str]
) -> None:
    with pytest.raises(SerializationError) as info:
        JSON.dumps_payload(args, kwargs)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message
    assert "not JSON-serializable" in message
    assert isinstance(info.value, ValueError)


def test_circular_reference_is_a_serialization_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(SerializationError, match=r"args\[0\].*circular"):
        JSON.dumps_payload((loop,), {})


def test_result_error_names_the_type() -> None:
    with pytest.raises(SerializationError, match="'set'"):
        JSON.dumps_result({1, 2})
    with pytest.raises(SerializationError, match=r"\['rows'\]\[0\].*'object'"):
        JSON.dumps_result({"rows": [object()]})


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"\xff\xfe",
        b"not json",
        b"[1, 2]",
        b'{"args": 1, "kwargs": {}}',
        b'{"args": [], "kwargs": []}',
        b'{"args": []}',
        b'{"args": [], "kwargs": {}, "extra": 1}',
        b"null",
    ],
)
def test_corrupt_json_payloads_raise(data: bytes) -> None:
    with pytest.raises(SerializationError):
        JSON.loads_payload(data)


@pytest.mark.parametrize("data", [b"", b"{", b"\xff", b"nope"])
def test_corrupt_json_results_raise(data: bytes) -> None:
    with pytest.raises(SerializationError):
        JSON.loads_result(data)


def test_memoryview_input_is_accepted() -> None:
    data = JSON.dumps_payload((1,), {})
    assert JSON.loads_payload(memoryview(data)) == ((1,), {})  # type: ignore[arg-type]


# ------------------------------------------------------------------ pickle


class Point:
    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and other.x == self.x

    __hash__ = None  # type: ignore[assignment]


def test_pickle_round_trips_python_values() -> None:
    args = (1, (2, 3), {4, 5}, Point(6), b"raw")
    kwargs = {"d": Decimal("1.5")}
    assert PICKLE.loads_payload(PICKLE.dumps_payload(args, kwargs)) == (args, kwargs)
    assert PICKLE.loads_result(PICKLE.dumps_result({1: Point(2)})) == {1: Point(2)}


@FAST
@given(
    args=st.lists(json_values, max_size=4),
    kwargs=st.dictionaries(st.text(max_size=16), json_values, max_size=5),
)
def test_pickle_payload_round_trip(args: list[Any], kwargs: dict[str, Any]) -> None:
    assert PICKLE.loads_payload(PICKLE.dumps_payload(tuple(args), kwargs)) == (
        tuple(args),
        kwargs,
    )


def test_pickle_errors_name_the_argument() -> None:
    with pytest.raises(SerializationError, match=r"args\[1\].*'function'"):
        PICKLE.dumps_payload((1, lambda: 1), {})
    with pytest.raises(SerializationError, match=r"kwargs\['cb'\]"):
        PICKLE.dumps_payload((), {"cb": lambda: 1})
    with pytest.raises(SerializationError, match="'generator'"):
        PICKLE.dumps_result(x for x in range(0))


@pytest.mark.parametrize("data", [b"", b"\x80\x05junk", b"{}", PICKLE.dumps_result([1, 2])])
def test_corrupt_pickle_payloads_raise(data: bytes) -> None:
    with pytest.raises(SerializationError):
        PICKLE.loads_payload(data)


# ------------------------------------------------------------------ lookup


class Custom:
    name = "custom"

    def dumps_payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        return repr((args, kwargs)).encode()

    def loads_payload(self, data: bytes) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}

    def dumps_result(self, value: Any) -> bytes:
        return b""

    def loads_result(self, data: bytes) -> Any:
        return None


def test_get_serializer_by_name() -> None:
    assert isinstance(get_serializer("json"), JsonSerializer)
    assert isinstance(get_serializer("pickle"), PickleSerializer)
    assert get_serializer("json").name == "json"
    assert get_serializer("pickle").name == "pickle"


def test_get_serializer_accepts_protocol_objects() -> None:
    custom = Custom()
    assert get_serializer(custom) is custom
    assert isinstance(custom, Serializer)
    assert get_serializer(JSON) is JSON


@pytest.mark.parametrize("spec", ["yaml", "", None, 3, object(), JsonSerializer])
def test_get_serializer_rejects_the_rest(spec: Any) -> None:
    with pytest.raises(ConfigError) as info:
        get_serializer(spec)
    err = info.value
    assert (err.code, err.field) == ("invalid_option", "serializer")
    assert repr(spec) in str(err)
    assert "'json'" in str(err) and "'pickle'" in str(err)
