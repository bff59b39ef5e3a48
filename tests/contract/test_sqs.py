"""The published contract suite on the SQS + DynamoDB backend, against a moto server.

Tests take DynamoDB tables in turns: a fresh one every :data:`TESTS_PER_TABLE` tests,
the previous one dropped. moto answers a Query by scanning the whole table and copies
the table's item map for each transaction's rollback, so with one table shared by the
session's ~280 SQS tests each test ran slower than the one before (a one-job test took
14 s at the end of the suite); a table per test costs a table creation per test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from backends.sqs import SQSStorage
from queue_core.testing import StorageContract, StorageWithRetention
from tests.contract.urls import with_option
from tests.servers.ports import free_port

TESTS_PER_TABLE = 20
_TABLE: dict[str, Any] = {"name": None, "uses": 0}
"""The table of the current turn and how many tests have used one so far."""


class TestSQSStorage(StorageContract):
    @pytest.fixture
    def sqs_url(self, moto_endpoint: str) -> str:
        if _TABLE["uses"] % TESTS_PER_TABLE == 0:
            ddb = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_endpoint)
            if _TABLE["name"]:
                ddb.delete_table(TableName=_TABLE["name"])
            _TABLE["name"] = f"qc-contract-{uuid.uuid4().hex[:12]}"
        _TABLE["uses"] += 1
        return (
            f"sqs://?region=us-east-1&table={_TABLE['name']}&prefix=c{uuid.uuid4().hex[:12]}"
            f"&endpoint_url={moto_endpoint}"
        )

    @pytest.fixture
    def storage(self, sqs_url: str) -> Iterator[SQSStorage]:
        s = SQSStorage.from_url(sqs_url)
        try:
            yield s
        finally:
            s.close()

    @pytest.fixture
    def storage_with_retention(self, sqs_url: str) -> Iterator[StorageWithRetention]:
        built: list[SQSStorage] = []

        def build(retention: str) -> SQSStorage:
            built.append(SQSStorage.from_url(with_option(sqs_url, "retention", retention)))
            return built[-1]

        yield build
        for storage in built:
            storage.close()

    @pytest.fixture
    def unreachable_storage(self, moto_endpoint: str) -> Iterator[SQSStorage]:
        """An endpoint that does not answer (SQS credentials come from the environment,
        not the URL: the moto fixture sets them)."""
        s = SQSStorage.from_url(
            f"sqs://?region=us-east-1&table=qc-down&endpoint_url=http://127.0.0.1:{free_port()}"
        )
        try:
            yield s
        finally:
            s.close()
