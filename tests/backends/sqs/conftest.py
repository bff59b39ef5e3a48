"""Helpers for the SQS backend's own tests (the moto server comes from tests/servers)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from backends.sqs import SQSStorage
from tests.servers.moto import TABLE

Factory = Callable[..., SQSStorage]


@pytest.fixture
def make_storage(moto_endpoint: str) -> Iterator[Factory]:
    """Build storages sharing one fresh prefix (several "workers" on one deployment)."""
    prefix = f"b{uuid.uuid4().hex[:12]}"
    made: list[SQSStorage] = []

    def make(**kw: object) -> SQSStorage:
        s = SQSStorage(
            region="us-east-1", table=TABLE, prefix=prefix, endpoint_url=moto_endpoint, **kw
        )
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
