"""Fenced code blocks of the Markdown docs, and what the doc-test harness does with each.

A block's info string is ``LANG [skip-test: REASON]``:

* ``python`` -- run (in one interpreter per page, blocks sharing one namespace, in page
  order, like a reader pasting them into one session). A block whose first line is a
  file-name comment (``# tasks.py``) is the content of that file: it is written to the
  page's working directory instead, where later blocks and commands import or run it.
  A ``toml`` block whose first line is ``# queue-core.toml`` (or another file name) is
  written the same way, and so is a ``yaml`` block whose first line is ``# flow.yaml``.
* ``bash`` / ``sh`` -- every command line is run by bash in the page's working
  directory and must exit 0; ``console`` -- the same for the ``$ `` lines (the other
  lines are sample output).
* anything else (no language: a command synopsis with ``[OPTIONS]``; ``text``) -- shown,
  not run.
* ``skip-test: REASON`` after the language -- deliberately not run (installs packages,
  starts CI); the reason is required.

Placeholders a reader fills in from earlier output are filled the same way: ``<job id>``
with the id that starts the latest line printed by code or a command (not ``dlq``),
``<dead id>`` with the first entry of the latest ``queue-core dlq list`` output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]

RUNNABLE = {"python", "bash", "sh", "console"}
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
_FILE_HEADER = re.compile(r"^#\s*(?P<name>[\w./-]+\.(?:py|toml|txt|json|yaml|yml|cfg|ini))\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: str
    line: int
    lang: str
    code: str
    skip_reason: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def file_name(self) -> str | None:
        """``tasks.py`` for a python block that starts with ``# tasks.py`` (also
        ``queue-core.toml`` for a toml block that starts with ``# queue-core.toml``)."""
        if self.lang not in ("python", "toml", "yaml"):
            return None
        first = self.code.lstrip("\n").split("\n", 1)[0]
        m = _FILE_HEADER.match(first)
        return m.group("name") if m else None

    @property
    def runnable(self) -> bool:
        runs = self.lang in RUNNABLE or self.file_name is not None
        return runs and self.skip_reason is None

    def to_json(self) -> dict[str, object]:
        return {"where": self.where, "lang": self.lang, "code": self.code,
                "file": self.file_name}


class MarkdownError(ValueError):
    """A block the harness cannot classify (e.g. ``skip-test`` without a reason)."""


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    rel = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name
    out: list[Block] = []
    lines = page.read_text().split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, start = m.group("fence"), m.group("info").strip(), i + 1
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        lang, _, rest = info.partition(" ")
        rest = rest.strip()
        skip = None
        if rest:
            if not rest.startswith("skip-test"):
                raise MarkdownError(f"{rel}:{start}: unknown marker {rest!r} after {lang!r}")
            skip = rest[len("skip-test"):].lstrip(":").strip()
            if not skip:
                raise MarkdownError(
                    f"{rel}:{start}: 'skip-test' needs a reason: ```{lang} skip-test: WHY"
                )
        out.append(Block(rel, start, lang.lower(), "\n".join(body) + "\n", skip))
    return out


def commands(block: Block) -> list[str]:
    """The command lines of a bash/sh/console block (continuations joined)."""
    text = block.code
    if block.lang == "console":
        text = "\n".join(
            line[2:] for line in block.code.split("\n") if line.startswith("$ ")
        )
    result: list[str] = []
    pending = ""
    for raw in text.split("\n"):
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line and not line.startswith("#"):
            result.append(line)
    return result
