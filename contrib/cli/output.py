"""Human tables and ``--json`` output for the CLI.

Tables are formatted here with plain string padding rather than a table library: the
CLI prints a handful of narrow columns, and one fewer runtime dependency keeps
``pip install queue-core`` small on workers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import Any

import click

from contrib.textsafe import json_safe, printable

__all__ = ["cell", "echo_json", "kv_block", "printable", "table"]

_MAX_CELL = 60


def cell(value: Any, *, width: int = _MAX_CELL) -> str:
    """One table cell: ``-`` for ``None``, ISO seconds for datetimes, one line, capped,
    control characters written as escapes (:func:`contrib.textsafe.printable`)."""
    if value is None:
        return "-"
    if isinstance(value, Enum):
        text = str(value.value)
    elif isinstance(value, datetime):
        text = value.isoformat(timespec="seconds")
    else:
        text = str(value)
    text = printable(" ".join(text.split()))
    if len(text) > width:
        text = text[: width - 1] + "…"
    return text


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A left-aligned plain-text table with a header rule."""
    cells = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    lines = [
        "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    for row in cells:
        lines.append("  ".join(t.ljust(w) for t, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def kv_block(pairs: Sequence[tuple[str, Any]]) -> str:
    """``key: value`` lines with aligned values (values are not truncated)."""
    width = max((len(k) for k, _ in pairs), default=0)
    out = []
    for key, value in pairs:
        text = cell(value, width=10_000) if not isinstance(value, (dict, list, tuple)) else (
            json_safe(json.dumps(value, ensure_ascii=False, default=str))
        )
        out.append(f"{(key + ':').ljust(width + 1)} {text}")
    return "\n".join(out)


def echo_json(obj: Mapping[str, Any] | Sequence[Any]) -> None:
    """Print ``obj`` as indented JSON (already JSON-ready: records' ``to_dict()``)."""
    click.echo(json_safe(json.dumps(obj, indent=2, ensure_ascii=False, default=str)))
