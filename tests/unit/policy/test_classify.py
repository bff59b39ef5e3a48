"""classify / error_names / validate_exception_classes: the retry-or-not table (SPEC §3)."""

from __future__ import annotations

from typing import Any

import pytest

from queue_core.records.errors import ConfigError, NonRetryableError, TaskError
from queue_core.rules import classify, error_names, validate_exception_classes


class AppError(Exception):
    pass


class SubAppError(AppError):
    pass


class Outer:
    class Inner(Exception):
        pass


HERE = __name__


@pytest.mark.parametrize(
    ("exc", "names"),
    [
        (ValueError("x"), ("ValueError", "builtins.ValueError")),
        (KeyError("k"), ("KeyError", "builtins.KeyError")),
        (AppError(), ("AppError", f"{HERE}.AppError")),
        (SubAppError(), ("SubAppError", f"{HERE}.SubAppError")),
        (Outer.Inner(), ("Inner", f"{HERE}.Outer.Inner")),
        (TaskError.fatal("f"), ("TaskError", "queue_core.records.errors.TaskError")),
        (NonRetryableError(), ("NonRetryableError", "queue_core.records.errors.NonRetryableError")),
    ],
)
def test_error_names(exc: BaseException, names: tuple[str, str]) -> None:
    assert error_names(exc) == names


@pytest.mark.parametrize(
    ("exc", "options", "retryable"),
    [
        # plain errors are retryable
        (ValueError(), {}, True),
        (TaskError("plain"), {}, True),
        (TimeoutError(), {}, True),
        # fatal / NonRetryableError never retried
        (TaskError.fatal("no"), {}, False),
        (NonRetryableError("no"), {}, False),
        (NonRetryableError("no"), {"retry_on": (NonRetryableError,)}, False),
        # TaskError.retryable forces a retry whatever the lists say
        (TaskError.retryable("yes"), {"dont_retry_on": (TaskError,)}, True),
        (TaskError.retryable("yes"), {"retry_on": (KeyError,)}, True),
        (TaskError.retryable("yes"), {"non_retryable": ["TaskError"]}, True),
        # dont_retry_on: isinstance, so subclasses count
        (ValueError(), {"dont_retry_on": (ValueError,)}, False),
        (SubAppError(), {"dont_retry_on": (AppError,)}, False),
        (AppError(), {"dont_retry_on": (SubAppError,)}, True),
        (KeyError(), {"dont_retry_on": (LookupError,)}, False),
        (KeyError(), {"dont_retry_on": (ValueError, TypeError)}, True),
        # retry_on: a whitelist
        (KeyError(), {"retry_on": (LookupError,)}, True),
        (SubAppError(), {"retry_on": (AppError,)}, True),
        (ValueError(), {"retry_on": (AppError,)}, False),
        (AppError(), {"retry_on": (SubAppError,)}, False),
        (TaskError("plain"), {"retry_on": (ValueError,)}, False),
        # dont_retry_on is checked before retry_on
        (SubAppError(), {"retry_on": (AppError,), "dont_retry_on": (SubAppError,)}, False),
        # non_retryable: exact names, class or fully qualified type; no subclass matching
        (ValueError(), {"non_retryable": ["ValueError"]}, False),
        (ValueError(), {"non_retryable": ["builtins.ValueError"]}, False),
        (ValueError(), {"non_retryable": ["valueerror"]}, True),
        (ValueError(), {"non_retryable": ["Value"]}, True),
        (AppError(), {"non_retryable": [f"{HERE}.AppError"]}, False),
        (SubAppError(), {"non_retryable": ["AppError"]}, True),
        (Outer.Inner(), {"non_retryable": ["Inner"]}, False),
        (Outer.Inner(), {"non_retryable": [f"{HERE}.Outer.Inner"]}, False),
        (UnicodeDecodeError("utf-8", b"", 0, 1, "x"), {"non_retryable": ["ValueError"]}, True),
        (ValueError(), {"non_retryable": ("KeyError", "TypeError")}, True),
        (ValueError(), {"non_retryable": frozenset({"ValueError"})}, False),
        # names are checked after retry_on
        (KeyError(), {"retry_on": (KeyError,), "non_retryable": ["KeyError"]}, False),
    ],
)
def test_classification_table(exc: BaseException, options: dict[str, Any], retryable: bool) -> None:
    assert classify(exc, **options) is retryable


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ()),
        (ValueError, (ValueError,)),
        ([ValueError, KeyError], (ValueError, KeyError)),
        ((ValueError, ValueError), (ValueError,)),
        ({AppError}, (AppError,)),
        ([], ()),
        ([KeyboardInterrupt], (KeyboardInterrupt,)),
    ],
)
def test_validate_exception_classes_accepts(value: Any, expected: tuple[type, ...]) -> None:
    assert validate_exception_classes(value, field="retry_on") == expected


@pytest.mark.parametrize(
    ("value", "bad"),
    [
        ("ValueError", "'ValueError'"),
        ([ValueError, "KeyError"], "'KeyError'"),
        (int, "<class 'int'>"),
        ([ValueError, 3], "3"),
        (ValueError(), "ValueError()"),
        (42, "42"),
    ],
)
def test_validate_exception_classes_names_the_bad_element(value: Any, bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_exception_classes(value, field="dont_retry_on")
    err = info.value
    assert (err.code, err.field) == ("invalid_option", "dont_retry_on")
    assert bad in str(err)
    assert "dont_retry_on" in str(err)


def test_string_names_are_pointed_to_non_retryable() -> None:
    with pytest.raises(ConfigError, match="non_retryable"):
        validate_exception_classes(["ValueError"], field="retry_on")
