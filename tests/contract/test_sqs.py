"""The published contract suite on the SQS + DynamoDB backend, against a moto server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.sqs import SQSStorage
from queue_core.testing import StorageContract, StorageWithRetention
from tests.contract.urls import with_option


class TestSQSStorage(StorageContract):
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
