"""Session fixture: one real moto server (``ThreadedMotoServer``) on a random loopback port.

Server mode, not in-process mocks, so worker subprocesses can share the same fake AWS
(they get ``endpoint_url``). A server that fails to start is an error, never a skip.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from moto.server import ThreadedMotoServer

TABLE = "qc-test-jobs"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _LinearizedDynamoDB:
    """WSGI wrapper: DynamoDB requests run one at a time, others (SQS long polls) freely.

    Real DynamoDB applies each conditional write and each transaction atomically; moto
    checks conditions and then writes without a lock, so two concurrent requests can
    both pass one condition. Serialising DynamoDB requests at the fake's edge gives the
    tests the atomicity the real service guarantees (and nothing more).
    """

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB"):
            with self._lock:
                return list(self._app(environ, start_response))
        return self._app(environ, start_response)


class _MotoServer(ThreadedMotoServer):
    def _server_entry(self) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        app = _LinearizedDynamoDB(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """The endpoint URL of a moto server running for the whole session."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.pop("AWS_PROFILE", None)
    port = _free_port()
    server = _MotoServer(ip_address="127.0.0.1", port=port, verbose=False)
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
