"""RetryPolicy: validation, backoff formula, jitter bounds, merging, the flat-option normalizer."""

from __future__ import annotations

import dataclasses
import math
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queue_core.records.errors import ConfigError
from queue_core.rules import RetryPolicy, merge_policies, policy_from_options

FAST = settings(max_examples=200, deadline=None)


def fixed_rng(value: float) -> Callable[[], float]:
    return lambda: value


def sequence_rng(*values: float) -> Callable[[], float]:
    it: Iterator[float] = iter(values)
    return lambda: next(it)


# ------------------------------------------------------------------ construction


def test_defaults_match_the_spec() -> None:
    p = RetryPolicy()
    assert (p.max_attempts, p.backoff, p.initial, p.coefficient) == (1, "exponential", 1.0, 2.0)
    assert (p.max_delay, p.jitter, p.non_retryable) == (600.0, 0.1, ())
    assert p.explicit == frozenset()


def test_durations_are_normalised_to_seconds() -> None:
    p = RetryPolicy(initial="30s", max_delay="1h30m")
    assert p.initial == 30.0 and p.max_delay == 5400.0
    assert isinstance(p.initial, float)


def test_frozen_and_keyword_only() -> None:
    p = RetryPolicy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.max_attempts = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        RetryPolicy(3)  # type: ignore[call-arg]


def test_explicit_records_given_fields_even_when_equal_to_default() -> None:
    p = RetryPolicy(max_attempts=1, jitter=0.1)
    assert p.explicit == {"max_attempts", "jitter"}
    assert p == RetryPolicy()  # explicit is not part of equality
    assert "explicit" not in repr(p)
    assert hash(p) == hash(RetryPolicy())


def test_non_retryable_is_normalised_to_a_tuple() -> None:
    assert RetryPolicy(non_retryable=["A", "b.B", "A"]).non_retryable == ("A", "b.B")
    assert RetryPolicy(non_retryable=(n for n in ["X"])).non_retryable == ("X",)
    assert RetryPolicy(non_retryable="KeyError").non_retryable == ("KeyError",)


def test_pickles_with_explicit_set() -> None:
    p = RetryPolicy(max_attempts=4, initial="2s")
    q = pickle.loads(pickle.dumps(p))
    assert q == p and q.explicit == p.explicit


def test_signature_shows_the_real_defaults() -> None:
    import inspect

    params = inspect.signature(RetryPolicy).parameters
    assert repr(params["max_attempts"].default) == "1"
    assert repr(params["max_delay"].default) == "600.0"


@pytest.mark.parametrize(
    ("kwargs", "code", "field", "fragment"),
    [
        ({"max_attempts": 0}, "invalid_option", "max_attempts", "from 1 to 100"),
        ({"max_attempts": 101}, "invalid_option", "max_attempts", "from 1 to 100"),
        ({"max_attempts": 2.0}, "invalid_option", "max_attempts", "integer"),
        ({"max_attempts": True}, "invalid_option", "max_attempts", "integer"),
        ({"max_attempts": "3"}, "invalid_option", "max_attempts", "integer"),
        ({"backoff": "linear"}, "invalid_option", "backoff", "'exponential' or 'fixed'"),
        ({"backoff": None}, "invalid_option", "backoff", "'exponential' or 'fixed'"),
        ({"initial": 0}, "invalid_duration", "initial", "'90s'"),
        ({"initial": "soon"}, "invalid_duration", "initial", "'90s'"),
        ({"max_delay": -1}, "invalid_duration", "max_delay", "'90s'"),
        ({"coefficient": 0.5}, "invalid_option", "coefficient", ">= 1.0"),
        ({"coefficient": float("inf")}, "invalid_option", "coefficient", ">= 1.0"),
        ({"coefficient": float("nan")}, "invalid_option", "coefficient", ">= 1.0"),
        ({"coefficient": "2"}, "invalid_option", "coefficient", ">= 1.0"),
        ({"jitter": -0.1}, "invalid_option", "jitter", "from 0.0 to 1.0"),
        ({"jitter": 1.5}, "invalid_option", "jitter", "from 0.0 to 1.0"),
        ({"jitter": False}, "invalid_option", "jitter", "from 0.0 to 1.0"),
        ({"non_retryable": [ValueError]}, "invalid_option", "non_retryable", "names"),
        ({"non_retryable": [""]}, "invalid_option", "non_retryable", "names"),
        ({"non_retryable": 3}, "invalid_option", "non_retryable", "names"),
    ],
)
def test_invalid_fields_name_field_value_and_range(
    kwargs: dict[str, Any], code: str, field: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        RetryPolicy(**kwargs)
    err = info.value
    assert (err.code, err.field) == (code, field)
    (value,) = kwargs.values()
    message = str(err)
    assert field in message
    assert fragment in message
    if not isinstance(value, list):
        assert repr(value) in message


def test_boundaries_are_accepted() -> None:
    RetryPolicy(max_attempts=1, jitter=0.0, coefficient=1.0)
    RetryPolicy(max_attempts=100, jitter=1.0)


# ------------------------------------------------------------------ delays


@pytest.mark.parametrize(
    ("policy", "delays"),
    [
        (RetryPolicy(initial=30, jitter=0), [30, 60, 120, 240, 480, 600, 600]),
        (RetryPolicy(initial=1, jitter=0, coefficient=3), [1, 3, 9, 27, 81, 243, 600]),
        (RetryPolicy(initial="5s", jitter=0, max_delay=12), [5, 10, 12, 12, 12, 12, 12]),
        (RetryPolicy(initial=7, jitter=0, backoff="fixed"), [7, 7, 7, 7, 7, 7, 7]),
        (RetryPolicy(initial=700, jitter=0, backoff="fixed"), [600] * 7),
        (RetryPolicy(initial=700, jitter=0), [600] * 7),
        (RetryPolicy(initial=2, jitter=0, coefficient=1.0), [2] * 7),
    ],
)
def test_base_delay_table(policy: RetryPolicy, delays: list[float]) -> None:
    assert [policy.base_delay(n) for n in range(1, 8)] == delays
    assert [policy.delay(n, fixed_rng(0.5)) for n in range(1, 8)] == delays  # jitter 0


@pytest.mark.parametrize("attempt", [1000, 10**6, 10**18, 2**80])
def test_huge_attempt_numbers_do_not_overflow(attempt: int) -> None:
    p = RetryPolicy(initial=1, coefficient=10, max_delay=60, jitter=0)
    assert p.base_delay(attempt) == 60.0
    assert RetryPolicy(coefficient=1.01, jitter=0).base_delay(attempt) == 600.0


@pytest.mark.parametrize("attempt", [0, -1, 1.0, True, None])
def test_attempt_must_be_a_positive_integer(attempt: Any) -> None:
    with pytest.raises(ValueError):
        RetryPolicy().base_delay(attempt)


@pytest.mark.parametrize(
    ("jitter", "r", "expected"),
    [
        (0.1, 0.0, 100.0),  # rng 0 -> the full delay d
        (0.1, 0.5, 95.0),
        (0.1, 0.999999, 90.00001),
        (0.5, 0.5, 75.0),
        (1.0, 0.25, 75.0),
        (1.0, 0.999999, 0.0001),
    ],
)
def test_subtractive_jitter(jitter: float, r: float, expected: float) -> None:
    p = RetryPolicy(initial=100, backoff="fixed", jitter=jitter)
    assert p.delay(1, fixed_rng(r)) == pytest.approx(expected)


def test_jitter_never_exceeds_the_cap() -> None:
    p = RetryPolicy(initial=1000, max_delay=60, jitter=0.3)
    for r in (0.0, 0.3, 0.99):
        assert 42.0 <= p.delay(5, fixed_rng(r)) <= 60.0


def test_rng_out_of_range_is_a_bug() -> None:
    with pytest.raises(ValueError):
        RetryPolicy().delay(1, fixed_rng(1.5))


def test_delay_draws_one_number_per_call() -> None:
    p = RetryPolicy(initial=10, backoff="fixed", jitter=1.0)
    rng = sequence_rng(0.0, 0.5)
    assert (p.delay(1, rng), p.delay(2, rng)) == (10.0, 5.0)


policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 100),
    backoff=st.sampled_from(["exponential", "fixed"]),
    initial=st.floats(1e-3, 1e6),
    coefficient=st.floats(1.0, 100.0),
    max_delay=st.floats(1e-3, 1e7),
    jitter=st.floats(0.0, 1.0),
)
unit = st.floats(0.0, 1.0, exclude_max=True)


@FAST
@given(policy=policies, attempt=st.integers(1, 10_000), r=unit)
def test_delay_stays_within_jitter_band_and_cap(
    policy: RetryPolicy, attempt: int, r: float
) -> None:
    d = policy.base_delay(attempt)
    assert d <= policy.max_delay
    delay = policy.delay(attempt, fixed_rng(r))
    assert d * (1 - policy.jitter) <= delay <= d
    assert delay <= policy.max_delay
    assert math.isfinite(delay)


@FAST
@given(policy=policies, attempt=st.integers(1, 10_000))
def test_base_delay_is_monotone_in_attempt(policy: RetryPolicy, attempt: int) -> None:
    assert policy.base_delay(attempt) <= policy.base_delay(attempt + 1)


# ------------------------------------------------------------------ merging


def test_merge_later_explicit_fields_win_field_by_field() -> None:
    queue = RetryPolicy(max_attempts=5, initial=10, jitter=0)
    task = RetryPolicy(initial=2, max_delay="1m")
    call = RetryPolicy(max_attempts=1)  # explicit default still overrides
    merged = merge_policies(queue, None, task, call)
    assert merged == RetryPolicy(max_attempts=1, initial=2, max_delay=60, jitter=0)
    assert merged.explicit == {"max_attempts", "initial", "jitter", "max_delay"}


def test_merge_order_queue_flow_task_call() -> None:
    layers = [RetryPolicy(max_attempts=n) for n in (2, 3, 4, 5)]
    assert merge_policies(*layers).max_attempts == 5
    assert merge_policies(*layers[:3], None).max_attempts == 4


def test_merge_without_layers_is_the_default() -> None:
    assert merge_policies() == RetryPolicy()
    assert merge_policies(None, None) == RetryPolicy()
    assert merge_policies().explicit == frozenset()


def test_merging_an_implicit_layer_changes_nothing() -> None:
    base = RetryPolicy(max_attempts=9)
    assert base.merged(RetryPolicy()) is base


def test_merged_rejects_non_policies() -> None:
    with pytest.raises(TypeError):
        RetryPolicy().merged({"max_attempts": 3})  # type: ignore[arg-type]


partial_policies = st.builds(
    lambda d: RetryPolicy(**d),
    st.fixed_dictionaries(
        {},
        optional={
            "max_attempts": st.integers(1, 100),
            "backoff": st.sampled_from(["exponential", "fixed"]),
            "initial": st.floats(1e-3, 1e4),
            "coefficient": st.floats(1.0, 10.0),
            "max_delay": st.floats(1e-3, 1e4),
            "jitter": st.floats(0.0, 1.0),
            "non_retryable": st.lists(st.sampled_from(["A", "B", "m.C"]), max_size=3),
        },
    ),
)


@FAST
@given(a=partial_policies, b=partial_policies, c=partial_policies)
def test_merge_is_associative_including_explicit_sets(
    a: RetryPolicy, b: RetryPolicy, c: RetryPolicy
) -> None:
    left = a.merged(b).merged(c)
    right = a.merged(b.merged(c))
    assert left == right
    assert left.explicit == right.explicit == a.explicit | b.explicit | c.explicit
    assert merge_policies(a, b, c) == left


@FAST
@given(a=partial_policies, b=partial_policies)
def test_merge_takes_each_field_from_the_last_layer_that_gave_it(
    a: RetryPolicy, b: RetryPolicy
) -> None:
    merged = a.merged(b)
    for f in dataclasses.fields(RetryPolicy):
        if f.name == "explicit":
            continue
        source = b if f.name in b.explicit else a
        assert getattr(merged, f.name) == getattr(source, f.name)


# ------------------------------------------------------------------ flat options


def test_no_options_gives_an_empty_explicit_set() -> None:
    p = policy_from_options()
    assert p == RetryPolicy() and p.explicit == frozenset()


@pytest.mark.parametrize(
    ("options", "expected", "explicit"),
    [
        ({"max_retries": 0}, RetryPolicy(max_attempts=1), {"max_attempts"}),
        ({"max_retries": 5}, RetryPolicy(max_attempts=6), {"max_attempts"}),
        ({"max_retries": 99}, RetryPolicy(max_attempts=100), {"max_attempts"}),
        ({"max_attempts": 3}, RetryPolicy(max_attempts=3), {"max_attempts"}),
        ({"retry_backoff": "5m"}, RetryPolicy(initial=300), {"initial"}),
        ({"retry_backoff": 2.0}, RetryPolicy(initial=2), {"initial"}),
        ({"retry_backoff_kind": "fixed"}, RetryPolicy(backoff="fixed"), {"backoff"}),
        ({"retry_coefficient": 3}, RetryPolicy(coefficient=3), {"coefficient"}),
        ({"retry_max_delay": "5m"}, RetryPolicy(max_delay=300), {"max_delay"}),
        ({"retry_jitter": 0}, RetryPolicy(jitter=0), {"jitter"}),
        ({"non_retryable": ["E"]}, RetryPolicy(non_retryable=("E",)), {"non_retryable"}),
    ],
)
def test_flat_options_table(
    options: dict[str, Any], expected: RetryPolicy, explicit: set[str]
) -> None:
    p = policy_from_options(**options)
    assert p == expected
    assert p.explicit == explicit


def test_spec_example_options() -> None:
    p = policy_from_options(max_retries=5, retry_backoff=2.0, retry_max_delay="5m")
    assert (p.max_attempts, p.initial, p.max_delay) == (6, 2.0, 300.0)
    assert p.explicit == {"max_attempts", "initial", "max_delay"}


def test_retry_object_passes_through() -> None:
    policy = RetryPolicy(max_attempts=4)
    assert policy_from_options(retry=policy) is policy


@pytest.mark.parametrize(
    ("options", "code", "field", "names"),
    [
        ({"max_retries": 1, "max_attempts": 2}, "conflicting_options", "max_retries",
         ["max_retries", "max_attempts"]),
        ({"retry": RetryPolicy(), "max_retries": 1}, "conflicting_options", "retry",
         ["retry", "max_retries"]),
        ({"retry": RetryPolicy(), "retry_jitter": 0.0, "non_retryable": []},
         "conflicting_options", "retry", ["retry", "retry_jitter", "non_retryable"]),
        ({"retry": {"max_attempts": 3}}, "invalid_option", "retry", ["RetryPolicy"]),
        ({"max_retries": -1}, "invalid_option", "max_retries", ["max_retries", "0 to 99"]),
        ({"max_retries": 100}, "invalid_option", "max_retries", ["max_retries", "0 to 99"]),
        ({"max_attempts": 0}, "invalid_option", "max_attempts", ["1 to 100"]),
        ({"retry_backoff": "fast"}, "invalid_duration", "retry_backoff",
         ["'retry_backoff'", "'fast'"]),
        ({"retry_max_delay": 0}, "invalid_duration", "retry_max_delay", ["'retry_max_delay'"]),
        ({"retry_backoff_kind": "linear"}, "invalid_option", "retry_backoff_kind",
         ["'linear'", "'exponential' or 'fixed'"]),
        ({"retry_coefficient": 0.9}, "invalid_option", "retry_coefficient", ["0.9", ">= 1.0"]),
        ({"retry_jitter": 2}, "invalid_option", "retry_jitter", ["2", "from 0.0 to 1.0"]),
    ],
)
def test_flat_option_errors(
    options: dict[str, Any], code: str, field: str, names: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        policy_from_options(**options)
    assert (info.value.code, info.value.field) == (code, field)
    for name in names:
        assert name in str(info.value)
