"""The published contract suite on the SQS + DynamoDB backend, against a moto server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.sqs import SQSStorage
from queue_core.testing import StorageContract


class TestSQSStorage(StorageContract):
    @pytest.fixture
    def storage(self, sqs_url: str) -> Iterator[SQSStorage]:
        s = SQSStorage.from_url(sqs_url)
        try:
            yield s
        finally:
            s.close()
