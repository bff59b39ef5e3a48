"""URL parsing, reprs without credentials, and driver-error translation."""

from __future__ import annotations

import pytest

from backends.sqs import SQSStorage
from queue_core.app.config import open_storage
from queue_core.records.errors import ConfigError, StorageUnavailable
from queue_core.records.jobs import JobState, NewJob
from tests.servers.moto import moto_server
from tests.servers.ports import free_port


def test_url_options_reach_the_storage(sqs_url: str) -> None:
    s = open_storage(sqs_url + "&retention=2h&visibility=5&hop=60")
    try:
        assert isinstance(s, SQSStorage)
        delivery = s.store.delivery
        assert (s.store.retention_ms, delivery.visibility_s, delivery.hop_s) == (
            2 * 3_600_000,
            5,
            60,
        )
        assert "testing" not in repr(s) and "secret" not in repr(s).lower()
    finally:
        s.close()


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("sqs://?colour=blue", "invalid_option"),
        ("sqs://?retention=soon", "invalid_duration"),
        ("sqs://AKIA:hunter2@host/?region=x", "invalid_url"),
        ("sqs://somehost/queues?region=x", "invalid_url"),  # was ignored
        ("sqs://?create=fasle", "invalid_option"),  # was read as create=true
        ("sqs://?table=a&table=b", "invalid_option"),  # the last one was taken
        ("sqs://?region=&table=a", "invalid_option"),  # was us-east-1
    ],
)
def test_bad_urls_are_config_errors_without_secrets(url: str, code: str) -> None:
    with pytest.raises(ConfigError) as err:
        SQSStorage.from_url(url)
    assert err.value.code == code
    assert "hunter2" not in str(err.value) and "hunter2" not in repr(err.value.value)


def test_a_visibility_under_a_second_is_refused_by_the_constructor_too() -> None:
    with pytest.raises(ConfigError) as err:
        SQSStorage(endpoint_url="http://127.0.0.1:1", visibility_s=-1)
    assert (err.value.code, err.value.field) == ("invalid_option", "visibility_s")


def test_unreachable_endpoint_is_storage_unavailable_at_each_call_until_it_answers() -> None:
    """A storage built while the endpoint is down (a worker started during an outage)
    builds; each call is ``StorageUnavailable`` until the endpoint answers, and the first
    call after that creates the table it could not create when built."""
    port = free_port()
    s = SQSStorage(endpoint_url=f"http://127.0.0.1:{port}", table="late", prefix="late")
    try:
        with pytest.raises(StorageUnavailable) as err:
            s.enqueue([NewJob(id="j0", task_name="t", queue="q", payload=b"[]")])
        assert "testing" not in str(err.value)
        with pytest.raises(StorageUnavailable):  # tried again, not a remembered failure
            s.stats()
        with moto_server(port=port):
            s.enqueue([NewJob(id="j1", task_name="t", queue="q", payload=b"[]")])
            job = s.get_job("j1")
            assert job is not None and job.state is JobState.QUEUED
            assert s.store.db.client is s.store.ddb  # the stand-in is gone once it ensured
            assert type(s.store.ddb).__name__ == "DynamoDB"
            assert s.get_job("j0") is None
    finally:
        s.close()
