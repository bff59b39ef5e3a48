"""Session fixture: one real moto server (``ThreadedMotoServer``) on a random loopback port.

Server mode, not in-process mocks, so worker subprocesses can share the same fake AWS
(they get ``endpoint_url``). A server that fails to start is an error, never a skip.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator

import pytest

TABLE = "qc-test-jobs"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """The endpoint URL of a moto server running for the whole session."""
    from moto.server import ThreadedMotoServer

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.pop("AWS_PROFILE", None)
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # prove it answers; a failure here errors every test that needs it
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        pass
    try:
        yield endpoint
    finally:
        server.stop()


@pytest.fixture
def sqs_url(moto_endpoint: str) -> str:
    """An ``sqs://`` URL on the session's moto server with a fresh prefix (test isolation)."""
    prefix = f"t{uuid.uuid4().hex[:12]}"
    return (
        f"sqs://?region=us-east-1&table={TABLE}&prefix={prefix}"
        f"&endpoint_url={moto_endpoint}"
    )
