"""queue_core.rules.ids: abbreviations that tell ids apart, lookups by unique prefix."""

from __future__ import annotations

import pytest

from queue_core.records.errors import ConfigError, NotFound
from queue_core.rules.ids import resolve_prefix, short_id_length, short_ids
from queue_core.storage.job_ids import new_job_ids


def test_ids_made_together_get_abbreviations_that_differ() -> None:
    ids = new_job_ids(6)
    assert len({i[:8] for i in ids}) == 1  # time-ordered: one head for all six
    short = short_ids(ids)
    assert len(set(short.values())) == 6
    assert all(i.startswith(s) for i, s in short.items())
    assert len({len(s) for s in short.values()}) == 1  # one common length


@pytest.mark.parametrize(
    ("ids", "length"),
    [
        ([], 8),
        (["abcdefgh12", "zbcdefgh12"], 8),
        (["abcdefgh12", "abcdefgh13"], 10),
        (["abc", "abd"], 8),  # shorter than the minimum: shown whole
        (["abcdefghij", "abcdefghij"], 8),  # one id, listed twice
    ],
)
def test_short_id_length(ids: list[str], length: int) -> None:
    assert short_id_length(ids) == length


def _resolver(ids: list[str], **kw: int) -> object:
    def resolve(text: str) -> str:
        return resolve_prefix(
            text,
            kind="job",
            exists=lambda i: i in ids,
            page=lambda limit, offset: ids[offset : offset + limit],
            **kw,
        )

    return resolve


def test_resolve_prefix() -> None:
    ids = ["01a2aa", "01a2ab", "01a3cc"]
    resolve = _resolver(ids)
    assert resolve("01a2ab") == "01a2ab"  # an id names itself
    assert resolve(" 01a3 ") == "01a3cc"
    with pytest.raises(ConfigError) as info:
        resolve("01a2")
    assert info.value.code == "ambiguous_id"
    assert str(info.value) == (
        "id prefix '01a2' is ambiguous: it starts 2 job ids (01a2aa, 01a2ab); give more characters"
    )
    with pytest.raises(NotFound, match="no job with id 'ff' or an id starting with it"):
        resolve("ff")


def test_resolve_prefix_reads_at_most_max_scan() -> None:
    ids = [f"{n:04d}" for n in range(2000)]
    read: list[int] = []

    def page(limit: int, offset: int) -> list[str]:
        read.append(limit)
        return ids[offset : offset + limit]

    with pytest.raises(NotFound, match="among the newest 1000"):
        resolve_prefix("1999", kind="job", exists=lambda i: False, page=page, max_scan=1000)
    assert sum(read) == 1000
