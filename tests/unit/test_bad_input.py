"""Bad input gets a clear ConfigError / SerializationError and changes nothing stored."""

from __future__ import annotations

from typing import Any

import pytest

from queue_core import ConfigError, Queue, RetryPolicy, SerializationError


@pytest.fixture
def queue() -> Queue:
    q = Queue("memory://")
    yield q
    q.close()


def _stored(q: Queue) -> list[Any]:
    return [(s.queue, s.ready, s.scheduled, s.skipped) for s in q.stats()]


DECORATOR_CASES: list[tuple[dict[str, Any], str, str]] = [
    ({"timeout": "soon"}, "invalid_duration", "'soon'"),
    ({"timeout": -1}, "invalid_duration", "-1"),
    ({"retry_backoff": "1x"}, "invalid_duration", "'1x'"),
    ({"retry_max_delay": 0}, "invalid_duration", "0"),
    ({"max_retries": 1, "max_attempts": 2}, "conflicting_options", "max_attempts"),
    ({"retry_on": [ValueError], "dont_retry_on": [KeyError]}, "conflicting_options", "retry_on"),
    ({"retry": RetryPolicy(max_attempts=2), "max_retries": 1}, "conflicting_options", "retry"),
    ({"max_attempts": 0}, "invalid_option", "max_attempts"),
    ({"max_retries": -1}, "invalid_option", "max_retries"),
    ({"retry_backoff_kind": "linear"}, "invalid_option", "'linear'"),
    ({"retry_jitter": 1.5}, "invalid_option", "1.5"),
    ({"retry_coefficient": 0.5}, "invalid_option", "0.5"),
    ({"retry_on": ["ValueError"]}, "invalid_option", "ValueError"),
    ({"non_retryable": [ValueError]}, "invalid_option", "non_retryable"),
    ({"heartbeat": 0.5}, "invalid_option", "heartbeat"),
    ({"schedule_to_start": "200ms"}, "invalid_option", "schedule_to_start"),
    ({"concurrency": "many"}, "invalid_option", "'many'"),
    ({"isolation": "fiber"}, "invalid_option", "'fiber'"),
    ({"kill_grace": "never"}, "invalid_duration", "'never'"),
    ({"priority": "high"}, "invalid_option", "'high'"),
    ({"priority": True}, "invalid_option", "True"),
    ({"queue": ""}, "invalid_option", "queue"),
    ({"dead_letter_replay": 5}, "invalid_option", "dead_letter_replay"),
    ({"retry": {"max_attempts": 2}}, "invalid_option", "retry"),
]


@pytest.mark.parametrize(("options", "code", "quoted"), DECORATOR_CASES)
def test_decorator_rejects(queue: Queue, options: dict[str, Any], code: str, quoted: str) -> None:
    before = _stored(queue)
    with pytest.raises(ConfigError) as err:
        @queue.task(**options)
        def body() -> None:
            return None
    assert err.value.code == code
    assert quoted in str(err.value)
    assert queue.tasks == {}
    assert _stored(queue) == before


@pytest.mark.parametrize(("options", "code", "quoted"), DECORATOR_CASES[:-2])
def test_apply_rejects_without_writing(
    queue: Queue, options: dict[str, Any], code: str, quoted: str
) -> None:
    @queue.task
    def body() -> None:
        return None

    with pytest.raises(ConfigError) as err:
        body.apply(**options)
    assert err.value.code == code and quoted in str(err.value)
    assert _stored(queue) == []


def test_apply_rejects_bad_delay_and_run_at(queue: Queue) -> None:
    @queue.task
    def body() -> None:
        return None

    with pytest.raises(ConfigError) as err:
        body.apply(delay="later")
    assert err.value.code == "invalid_duration" and "'later'" in str(err.value)
    with pytest.raises(ConfigError) as err2:
        body.apply(run_at="tomorrow")
    assert err2.value.code == "invalid_option"
    assert _stored(queue) == []


def test_async_body_with_process_isolation_conflicts(queue: Queue) -> None:
    with pytest.raises(ConfigError) as err:
        @queue.task(isolation="process")
        async def body() -> None:
            return None
    assert err.value.code == "conflicting_options" and "isolation" in str(err.value)


def test_unknown_option_is_type_error(queue: Queue) -> None:
    with pytest.raises(TypeError, match="retries"):
        queue.task(retries=3)  # type: ignore[call-overload]

    @queue.task
    def body() -> None:
        return None

    with pytest.raises(TypeError, match="tmeout"):
        body.apply(tmeout=3)  # type: ignore[call-arg]


def test_duplicate_task_name(queue: Queue) -> None:
    @queue.task(name="same")
    def one() -> None:
        return None

    with pytest.raises(ConfigError) as err:
        @queue.task(name="same")
        def two() -> None:
            return None
    assert "'same'" in str(err.value)
    assert queue.tasks["same"] is one


def test_unserializable_args_write_nothing(queue: Queue) -> None:
    @queue.task
    def body(x: object) -> None:
        return None

    with pytest.raises(SerializationError):
        body.delay(object())
    with pytest.raises(SerializationError):
        body.apply(kwargs={"x": {1, 2}})
    with pytest.raises(SerializationError):
        body.map([(1,), (object(),)])
    assert _stored(queue) == []


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("bogus://x", "unknown_scheme"),
        ("not a url", "invalid_url"),
        ("redsi://h", "unknown_scheme"),
    ],
)
def test_bad_url(url: str, code: str) -> None:
    with pytest.raises(ConfigError) as err:
        Queue(url)
    assert err.value.code == code
    assert "memory" in str(err.value) and "sqlite" in str(err.value)


def test_bad_queue_options() -> None:
    with pytest.raises(ConfigError) as err:
        Queue("memory://", default_timeout="forever")
    assert err.value.code == "invalid_duration"
    with pytest.raises(ConfigError) as err2:
        Queue("memory://", serializer="yaml")
    assert err2.value.code == "invalid_option"


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("2days", "'days' is not a unit: write 2days as '48h'"),
        ("2w", "'w' is not a unit: write 2w as '336h'"),
        ("5 min", "'min' is not a unit: write 5min as '5m'"),
        ("1h30x", "'x' is not a unit; units are ns, us, ms, s, m, h, d"),
    ],
)
def test_duration_with_an_unknown_unit_names_it(value: str, hint: str) -> None:
    with pytest.raises(ConfigError) as err:
        Queue("memory://", lease=value)
    assert err.value.code == "invalid_duration"
    assert hint in str(err.value) and repr(value) in str(err.value)
