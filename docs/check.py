"""Check the docs (run by ``nox -s docs``): exits non-zero listing every problem.

* every name in ``queue_core.__all__`` is rendered in the generated API reference: a
  ``::: dotted.path`` mkdocstrings directive in docs/reference/*.md names it, or names a
  module that exports it (``mkdocs build --strict``, also run by ``nox -s docs``, then
  checks that every directive renders);
* every relative Markdown link in README.md and docs/**/*.md points at an existing file;
* every CLI command appears in docs/guides/cli.md;
* README.md links every guide (docs/guides/*.md) and every backend page (docs/backends/*.md);
* the tables of docs/reference/storage.md are what ``tools/storage_reference.py``
  generates from the docstrings today (the page reads on disk, and stays true).

That every code block of README.md and docs/guides runs as written is checked by the
test suite (tests/docs, run by ``nox -s tests``), not here: it needs the test servers.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
DIRECTIVE = re.compile(r"^:::\s*(\S+)", re.MULTILINE)


def _resolve(path: str) -> Any:
    """The object a mkdocstrings directive names (``pkg.mod`` or ``pkg.mod.Obj.attr``)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def rendered_objects(reference_text: str) -> tuple[list[int], list[str]]:
    """ids of the objects the directives render (a module renders its public names)."""
    ids: list[int] = []
    problems: list[str] = []
    for path in DIRECTIVE.findall(reference_text):
        try:
            obj = _resolve(path)
        except (ImportError, AttributeError):
            problems.append(f"docs/reference: directive `::: {path}` names nothing importable")
            continue
        ids.append(id(obj))
        if isinstance(obj, ModuleType):
            names = getattr(obj, "__all__", [n for n in vars(obj) if not n.startswith("_")])
            ids.extend(id(getattr(obj, n)) for n in names)
    return ids, problems


def main() -> int:
    sys.path.insert(0, str(ROOT))
    import click

    import queue_core
    from contrib.cli import cli
    from contrib.cli.commands import load_commands

    load_commands()  # command modules are imported on demand

    reference = "\n".join(p.read_text() for p in sorted((DOCS / "reference").glob("*.md")))
    rendered, problems = rendered_objects(reference)
    for name in queue_core.__all__:
        if id(getattr(queue_core, name)) not in rendered:
            problems.append(
                f"queue_core.{name} is not rendered by any `::: ...` directive in docs/reference/"
            )

    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if "://" in target or target.startswith(("#", "mailto:")):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                problems.append(f"{page.relative_to(ROOT)}: broken link {target}")

    readme = (ROOT / "README.md").read_text()
    linked = {(ROOT / t.split("#", 1)[0]).resolve() for t in LINK.findall(readme)}
    for page in sorted([*(DOCS / "guides").glob("*.md"), *(DOCS / "backends").glob("*.md")]):
        if page.resolve() not in linked:
            problems.append(f"README.md does not link {page.relative_to(ROOT)}")

    cli_doc = (DOCS / "guides" / "cli.md").read_text()
    commands: list[str] = []
    for name, command in cli.commands.items():
        if isinstance(command, click.Group):
            commands.extend(f"{name} {sub}" for sub in command.commands)
        else:
            commands.append(name)
    for command_line in commands:
        if command_line not in cli_doc:
            problems.append(f"CLI command `{command_line}` is not documented in docs/guides/cli.md")

    sys.path.insert(0, str(ROOT / "tools"))
    import storage_reference

    if storage_reference.stale():
        problems.append(
            "docs/reference/storage.md is stale: run `python tools/storage_reference.py --write`"
        )

    for problem in problems:
        print(problem, file=sys.stderr)
    print(
        f"docs: {len(pages)} pages, {len(queue_core.__all__)} public names, "
        f"{len(commands)} CLI commands checked; {len(problems)} problem(s)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
