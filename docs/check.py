"""Check the docs (run by ``nox -s docs``): exits non-zero listing every problem.

* every name in ``queue_core.__all__`` is mentioned in docs/reference/*.md;
* every relative Markdown link in README.md and docs/**/*.md points at an existing file;
* every CLI command appears in docs/guides/cli.md;
* README.md links every guide (docs/guides/*.md) and every backend page (docs/backends/*.md).

That every code block of README.md and docs/guides runs as written is checked by the
test suite (tests/docs, run by ``nox -s tests``), not here: it needs the test servers.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def main() -> int:
    sys.path.insert(0, str(ROOT))
    import click

    import queue_core
    from contrib.cli import cli

    problems: list[str] = []
    reference = "\n".join(p.read_text() for p in sorted((DOCS / "reference").glob("*.md")))
    for name in queue_core.__all__:
        if not re.search(rf"\b{re.escape(name)}\b", reference):
            problems.append(f"queue_core.{name} is not mentioned in docs/reference/")

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

    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"docs: {len(pages)} pages, {len(queue_core.__all__)} public names, "
          f"{len(commands)} CLI commands checked; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
