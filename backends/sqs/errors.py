"""The one place where botocore exceptions become queue-core exceptions.

Every AWS call of the SQS backend runs inside :func:`translate`. Conditional-check
failures are control flow (fencing, races) and are handled by the caller *inside* the
block before they get here; anything that escapes is translated:

* connection problems, throttling and 5xx answers -> :class:`StorageUnavailable`
  (workers retry with backoff);
* everything else botocore raises -> :class:`StorageError`.

Messages name the AWS error code and operation only: never a credential, a request
signature or an endpoint's userinfo.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from queue_core.records.errors import StorageError, StorageUnavailable

__all__ = ["error_code", "translate"]

_UNAVAILABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "ServiceUnavailable",
        "InternalServerError",
        "InternalFailure",
        "RequestThrottled",
        "TransactionInProgressException",
    }
)


def error_code(exc: ClientError) -> str:
    """The AWS error code of a ``ClientError`` (``""`` when absent)."""
    return str(exc.response.get("Error", {}).get("Code", ""))


@contextmanager
def translate(what: str) -> Iterator[None]:
    """Run AWS calls, translating botocore exceptions into the library's tree.

    Args:
        what: a short description of the operation, used in the error message.

    Raises:
        StorageUnavailable: the endpoint cannot be reached, or AWS asks to slow down.
        StorageError: any other AWS or botocore failure.
    """
    try:
        yield
    except StorageError:
        raise
    except ClientError as exc:
        code = error_code(exc)
        op = getattr(exc, "operation_name", "?")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        msg = f"sqs backend: {what} failed: {code or 'error'} in {op}"
        if code in _UNAVAILABLE_CODES or (isinstance(status, int) and status >= 500):
            raise StorageUnavailable(msg) from exc
        raise StorageError(msg) from exc
    except (
        EndpointConnectionError,
        ConnectionClosedError,
        ConnectTimeoutError,
        ReadTimeoutError,
    ) as exc:
        raise StorageUnavailable(f"sqs backend: {what} failed: AWS endpoint unreachable") from exc
    except NoCredentialsError as exc:
        raise StorageError(
            f"sqs backend: {what} failed: no AWS credentials found in the usual chain"
        ) from exc
    except BotoCoreError as exc:
        raise StorageError(f"sqs backend: {what} failed: {type(exc).__name__}") from exc
