"""The DynamoDB table of the SQS backend: one table, several sparse indexes.

Item families (``P`` is the storage's key prefix, ``"<prefix>#"``):

=================  ======================  ==========================================
pk                 sk                      what
=================  ======================  ==========================================
``P J#<job id>``   ``J``                   a job: state, spec, lease, fencing token
``P J#<job id>``   ``A#00001`` …           one attempt record per attempt
``P D#<dead id>``  ``D``                   a dead-letter entry (payload, error, attempts)
``P C#<key>``      ``C``                   a concurrency counter: ``run`` and ``act``
=================  ======================  ==========================================

Global secondary indexes (all sparse: an item is in an index only while it carries
that index's key attributes, so moving a job between states moves it between indexes):

* ``ready``  ``rq`` = ``P Q#<queue>``, ``rk`` = inverted priority / ready time / sequence:
  queued jobs that are due, in claim order.
* ``due``    ``dp`` = ``P P`` (parked: queued, not yet due, by ready time), ``P S``
  (due and bounded by schedule-to-start, by deadline), ``P R`` (running, by
  :func:`~queue_core.rules.leases.reap_due`: lease expiry, or the attempt's deadline plus
  the reaper's margin when that comes first), ``P F`` (finished, by ``finished_at``, for
  prune).
* ``timeout`` ``tp`` = ``P XT`` / ``P XF`` executions by deadline / finish time, ``P EVP``
  workflow events; ``P T`` running jobs by attempt deadline as an earlier version wrote
  them (a job's deadline is in ``due`` since: one index entry less to write per job).
* ``heartbeat`` ``hp`` = ``P H``, ``hx`` = heartbeat deadline (running, heartbeat on).
* ``all``    ``ap`` = ``P`` for every job (stats, pending counts).
* ``dead`` / ``deadtask`` ``lp`` = ``P DL`` / ``ltp`` = ``P DT#<task>``, ``lx`` =
  dead time + id: dead-letter entries newest first.

Finished jobs carry a ``ttl`` attribute (epoch seconds) so DynamoDB's TTL removes what
``prune`` has not; dead-letter entries have none (kept until purged).
"""

from __future__ import annotations

import time
from typing import Any

from botocore.exceptions import ClientError

from backends.sqs.errors import error_code, translate

__all__ = ["DUE_TYPE", "INDEXES", "due_by", "ensure_table", "table_definition"]

#: index name -> (hash attribute, range attribute or None)
INDEXES: dict[str, tuple[str, str | None]] = {
    "ready": ("rq", "rk"),
    "due": ("dp", "dx"),
    "timeout": ("tp", "tx"),
    "heartbeat": ("hp", "hx"),
    "all": ("ap", None),
    "dead": ("lp", "lx"),
    "deadtask": ("ltp", "lx"),
}

_TYPES = {
    "pk": "S",
    "sk": "S",
    "rq": "S",
    "rk": "S",
    "dp": "S",
    "dx": "N",
    "tp": "S",
    "tx": "N",
    "hp": "S",
    "hx": "N",
    "ap": "S",
    "lp": "S",
    "ltp": "S",
    "lx": "S",
}


DUE_TYPE: dict[str, Any] = {":ratype": {"S": "N"}}
"""The value :func:`due_by` names: give it with the filter's other values."""


def due_by(value: str) -> str:
    """A filter that passes a job whose run time ``ra`` is at or before ``:value`` --
    and a job whose ``ra`` is not a number at all (a corrupt record), so that the claim
    meets it and dead-letters it ``corrupt_record`` and the burst end check counts it,
    rather than DynamoDB hiding it forever (a comparison of text with a number is false)
    or moto failing the whole request over it (issue 26, found by ``nox -s fuzz``)."""
    return f"(NOT attribute_type(ra, :ratype) OR ra <= :{value})"


def table_definition(name: str) -> dict[str, Any]:
    """The ``CreateTable`` arguments for a table called ``name`` (on-demand billing)."""
    used = {"pk", "sk"}
    gsis: list[dict[str, Any]] = []
    for index, (hash_key, range_key) in INDEXES.items():
        schema = [{"AttributeName": hash_key, "KeyType": "HASH"}]
        used.add(hash_key)
        if range_key is not None:
            schema.append({"AttributeName": range_key, "KeyType": "RANGE"})
            used.add(range_key)
        gsis.append(
            {"IndexName": index, "KeySchema": schema, "Projection": {"ProjectionType": "ALL"}}
        )
    return {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": a, "AttributeType": _TYPES[a]} for a in sorted(used)
        ],
        "GlobalSecondaryIndexes": gsis,
    }


def ensure_table(client: Any, name: str, *, wait_s: float = 60.0) -> None:
    """Create the table ``name`` (with TTL on ``ttl``) unless it exists; wait until ACTIVE.

    Idempotent and safe to run concurrently: a racing creator's table is waited for.
    """
    with translate(f"creating table {name!r}"):
        try:
            status = client.describe_table(TableName=name)["Table"]["TableStatus"]
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise
            try:
                client.create_table(**table_definition(name))
            except ClientError as exc2:
                if error_code(exc2) != "ResourceInUseException":
                    raise
            status = "CREATING"
        deadline = time.monotonic() + wait_s
        while status != "ACTIVE" and time.monotonic() < deadline:
            time.sleep(0.2)
            status = client.describe_table(TableName=name)["Table"]["TableStatus"]
        try:
            ttl = client.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
            if ttl.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
                client.update_time_to_live(
                    TableName=name,
                    TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"},
                )
        except ClientError as exc:
            # a concurrent creator enabling TTL at the same moment is fine
            if error_code(exc) != "ValidationException":
                raise
