"""queue_core.records.base.Record: frozen dataclasses sharing __eq__/__hash__/__repr__ behave as
the methods @dataclass would have generated, without generating them per class."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from queue_core.app import events
from queue_core.records import jobs as model
from queue_core.records import workers
from queue_core.records.base import Record
from queue_core.rules import throughput


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Shared(Record):
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    note: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Generated:
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    note: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class One(Record):
    value: int


@dataclass(frozen=True, eq=False, repr=False)
class Empty(Record):
    pass


def _pairs() -> list[tuple[dict[str, object], dict[str, object]]]:
    a = {"name": "a", "count": 1, "tags": ("x",), "note": "n1"}
    return [
        (a, dict(a)),
        (a, {**a, "note": "other"}),  # not compared
        (a, {**a, "count": 2}),
        (a, {**a, "tags": ()}),
    ]


@pytest.mark.parametrize(("left", "right"), _pairs())
def test_shared_methods_answer_as_the_generated_ones(
    left: dict[str, object], right: dict[str, object]
) -> None:
    s1, s2 = Shared(**left), Shared(**right)  # type: ignore[arg-type]
    g1, g2 = Generated(**left), Generated(**right)  # type: ignore[arg-type]
    assert (s1 == s2) is (g1 == g2)
    assert (s1 != s2) is (g1 != g2)
    assert (hash(s1) == hash(s2)) is (hash(g1) == hash(g2))
    assert hash(s1) == hash(g1)  # the same tuple is hashed
    assert repr(s1) == repr(g1).replace("Generated(", "Shared(")
    assert s1.__eq__(g1) is NotImplemented and g1.__eq__(s1) is NotImplemented
    assert s1 != ("a", 1, ("x",))


def test_one_field_no_field_and_nesting() -> None:
    assert One(1) == One(1) and One(1) != One(2) and hash(One(1)) == hash((1,))
    assert repr(One(1)) == "One(value=1)"
    assert Empty() == Empty() and hash(Empty()) == hash(())
    assert repr(Empty()) == "Empty()"
    with pytest.raises(dataclasses.FrozenInstanceError):
        One(1).value = 2  # type: ignore[misc]
    unhashable = model.RenewResult(lost=[], cancel_requested=[])
    assert unhashable == model.RenewResult(lost=[], cancel_requested=[])
    with pytest.raises(TypeError):
        hash(unhashable)  # a list field: as unhashable as the generated __hash__ made it


@pytest.mark.parametrize(
    "cls",
    [
        *(
            c
            for c in vars(model).values()
            if isinstance(c, type) and issubclass(c, Record) and dataclasses.is_dataclass(c)
        ),
        events.AttemptStarted,
        events.AttemptEnded,
        workers.WorkerInfo,
        throughput.ThroughputCount,
    ],
)
def test_the_records_generate_no_eq_hash_or_repr(cls: type) -> None:
    assert dataclasses.is_dataclass(cls)
    assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert not {"__eq__", "__hash__", "__repr__"} & set(vars(cls))


def test_model_records_keep_value_semantics() -> None:
    ref = model.LeaseRef("j", 1, "t")
    assert ref == model.LeaseRef("j", 1, "t") and {ref: 1}[model.LeaseRef("j", 1, "t")] == 1
    assert ref != model.LeaseRef("j", 2, "t")
    assert repr(ref) == "LeaseRef(job_id='j', attempt=1, lease_token='t')"
    records = [c for c in vars(model).values() if dataclasses.is_dataclass(c)]
    assert len(records) == 15 and all(issubclass(c, Record) for c in records)  # type: ignore[arg-type]  # 14 + the imported ProgressUpdate
    info = model.AttemptRecord.__mro__
    assert info.index(Record) < info.index(Mapping)  # not Mapping's dict comparison


def test_a_time_past_what_datetime_holds_reads_as_its_last_or_first_day() -> None:
    """A corrupt stored time (DynamoDB ``enq`` = 253407365431296 in the fuzz session)
    must not make a job's record unreadable: ``dt_from_ms`` raised ValueError."""
    from datetime import datetime, timezone

    from queue_core.records.jobs import dt_from_ms

    assert dt_from_ms(253_407_365_431_296) == datetime.max.replace(tzinfo=timezone.utc)
    assert dt_from_ms(-(10**17)) == datetime.min.replace(tzinfo=timezone.utc)
    assert dt_from_ms(1_000) == datetime(1970, 1, 1, 0, 0, 1, tzinfo=timezone.utc)
    assert dt_from_ms(None) is None
