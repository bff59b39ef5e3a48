"""``Table.write``: a lone write reports a refused condition or a conflict with another
transaction the way a cancelled transaction does (no server needed: a stub client)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from backends.sqs.dynamo import Table, TxCancelled


class _Client:
    def __init__(self, code: str | None) -> None:
        self.code = code
        self.sent: list[str] = []

    def _answer(self, op: str) -> dict[str, Any]:
        self.sent.append(op)
        if self.code is not None:
            raise ClientError({"Error": {"Code": self.code, "Message": "x"}}, op)
        return {}

    def update_item(self, **_: Any) -> dict[str, Any]:
        return self._answer("UpdateItem")

    def put_item(self, **_: Any) -> dict[str, Any]:
        return self._answer("PutItem")

    def transact_write_items(self, **_: Any) -> dict[str, Any]:
        return self._answer("TransactWriteItems")


_UPDATE = {"Update": {"Key": {}}}
_PUT = {"Put": {"Item": {}}}


@pytest.mark.parametrize(
    ("code", "reported"),
    [
        ("ConditionalCheckFailedException", "ConditionalCheckFailed"),
        ("TransactionConflictException", "TransactionConflict"),
    ],
)
@pytest.mark.parametrize("action", [_UPDATE, _PUT])
def test_a_lone_write_that_fails_is_reported_like_a_cancelled_transaction(
    code: str, reported: str, action: dict[str, Any]
) -> None:
    client = _Client(code)
    with pytest.raises(TxCancelled) as err:
        Table(client, "t").write([action])
    assert err.value.codes == [reported]
    assert client.sent == ["UpdateItem" if "Update" in action else "PutItem"]


def test_other_errors_pass_through_and_several_actions_are_one_transaction() -> None:
    with pytest.raises(ClientError):
        Table(_Client("ProvisionedThroughputExceededException"), "t").write([_UPDATE])
    client = _Client(None)
    Table(client, "t").write([_UPDATE])
    Table(client, "t").write([_UPDATE, _PUT])
    assert client.sent == ["UpdateItem", "TransactWriteItems"]
