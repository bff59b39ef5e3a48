"""Session fixture: one real moto server (``ThreadedMotoServer``) on a random loopback port.

Server mode, not in-process mocks, so worker subprocesses can share the same fake AWS
(they get ``endpoint_url``). A server that fails to start is an error, never a skip.
"""

from __future__ import annotations

import base64
import json
import os
import random
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from moto.server import ThreadedMotoServer

from tests.servers.ports import free_port

TABLE = "qc-test-jobs"



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


class Throttle:
    """WSGI wrapper: while :attr:`rate` is above 0, that share of the DynamoDB and SQS
    requests is answered as AWS answers a throttled one (HTTP 400,
    ``ProvisionedThroughputExceededException`` for DynamoDB, ``ThrottlingException``
    for SQS) without reaching moto, so botocore's retries and then queue-core's
    ``StorageUnavailable`` paths run as under real throttling (the chaos drain's fault)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self.rate = 0.0
        self.throttled = 0
        self._rng = random.Random(7)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if self.rate > 0 and target and self._rng.random() < self.rate:
            self.throttled += 1
            if target.startswith("DynamoDB"):
                code = "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"
                ctype = "application/x-amz-json-1.0"
            else:
                code, ctype = "com.amazonaws.sqs#ThrottlingException", "application/x-amz-json-1.0"
            body = json.dumps({"__type": code, "message": "Rate exceeded (test throttle)"})
            start_response(
                "400 Bad Request",
                [("Content-Type", ctype), ("x-amzn-ErrorType", code.rsplit("#", 1)[1])],
            )
            return [body.encode()]
        return self._app(environ, start_response)


_TX_LIMIT = 4 * 1024 * 1024
"""DynamoDB's bound on the items of one ``TransactWriteItems`` (moto does not check it)."""


def _request_bytes(value: Any) -> int:
    """The size DynamoDB counts for ``value`` (an action, item or attribute value in
    DynamoDB JSON): names and strings as UTF-8, binary decoded from base64."""
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get("B"), (str, bytes)):
            blob = value["B"]  # base64 on the wire, bytes once moto has parsed it
            return len(base64.b64decode(blob) if isinstance(blob, str) else blob)
        return sum(len(k.encode()) + _request_bytes(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(map(_request_bytes, value))
    return len(str(value).encode())


def _refuse_over_4mb(transact_items: list[Any]) -> None:
    """Refuse a transaction over :data:`_TX_LIMIT` as DynamoDB does (``ValidationException``)."""
    if sum(map(_request_bytes, transact_items)) > _TX_LIMIT:
        from moto.dynamodb.exceptions import MockValidationException

        raise MockValidationException("Transaction request cannot be larger than 4 MB")


def _cheap_transaction_backups() -> None:
    """moto (5.x) backs up a whole table with ``copy.deepcopy`` once per *item* of a
    ``TransactWriteItems``, for its rollback, so a 100-item transaction on a table of
    thousands of items takes seconds. Back it up once per transaction, deep-copying only
    the items the transaction touches (the rest are shared: a rolled-back transaction
    changed none of them). Same rollback, a fraction of the work. Requests are
    serialised by :class:`_LinearizedDynamoDB`, so one transaction runs at a time."""
    import copy
    import types

    from moto.dynamodb import models
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    if getattr(models, "_qc_patched", False):
        return
    backups: dict[int, Any] = {}
    touched: list[tuple[Any, Any]] = []
    active = [False]

    def backup(table: Any) -> Any:
        twin = copy.copy(table)
        twin.items = copy.copy(table.items)
        for hash_key, inner in table.items.items():
            twin.items[hash_key] = dict(inner) if isinstance(inner, dict) else inner
        for hash_key, range_key in touched:
            inner = twin.items.get(hash_key)
            if isinstance(inner, dict) and range_key in inner:
                inner[range_key] = copy.deepcopy(inner[range_key])
        return twin

    def deepcopy(obj: Any, memo: Any = None) -> Any:
        if not (active[0] and isinstance(obj, Table)):
            return copy.deepcopy(obj, memo)
        if id(obj) not in backups:
            backups[id(obj)] = backup(obj)
        return backups[id(obj)]

    original = models.DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: Any) -> None:
        _refuse_over_4mb(transact_items)
        touched.clear()
        for entry in transact_items:
            op = next(iter(entry.values()))
            key = op.get("Key") or op.get("Item") or {}
            if "pk" in key and "sk" in key:
                touched.append((DynamoType(key["pk"]), DynamoType(key["sk"])))
        backups.clear()
        active[0] = True
        try:
            original(self, transact_items)
        finally:
            active[0] = False
            backups.clear()

    models.copy = types.SimpleNamespace(copy=copy.copy, deepcopy=deepcopy)  # type: ignore[assignment,attr-defined]
    models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    models._qc_patched = True  # type: ignore[attr-defined]


class _MotoServer(ThreadedMotoServer):
    throttle: Throttle

    def _server_entry(self) -> None:
        _cheap_transaction_backups()
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        app = self.throttle = Throttle(
            _LinearizedDynamoDB(DomainDispatcherApplication(create_backend_app))
        )
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()


@contextmanager
def moto_server(port: int | None = None) -> Iterator[tuple[str, _MotoServer]]:
    """A moto server of the caller's own on ``port`` (default: a free one): (its endpoint
    URL, the server, whose ``throttle`` the caller may turn up)."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.pop("AWS_PROFILE", None)
    port = free_port() if port is None else port
    server = _MotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # prove it answers; a failure here errors every test that needs it
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        pass
    try:
        yield endpoint, server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """The endpoint URL of a moto server running for the whole session."""
    with moto_server() as (endpoint, _):
        yield endpoint


@pytest.fixture
def sqs_url(moto_endpoint: str) -> str:
    """An ``sqs://`` URL on the session's moto server with a fresh prefix (test isolation)."""
    prefix = f"t{uuid.uuid4().hex[:12]}"
    return f"sqs://?region=us-east-1&table={TABLE}&prefix={prefix}&endpoint_url={moto_endpoint}"
