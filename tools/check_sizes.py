"""Size gate (run by ``nox -s lint``): no file over 600 lines, no function over 60 lines.

Checks every ``.py`` file under ``queue_core/`` and ``backends/``. A file's size is its
number of lines; a function's size is the lines from its ``def`` to its last line, minus
its docstring (a long docstring is documentation, not code). Nested functions count on
their own and inside their parent.

ruff has no function-length rule (its C901 / PLR0912 / PLR0915 complexity gates are in
``ruff-gates.toml``), hence this script.

Today's offenders are allow-listed below with their size when the gate was added. The
list only shrinks: an allow-listed file or function fails again if it grows past its
recorded size, and an entry that is no longer over the limit (or no longer exists) fails
with "remove it from the allow-list", so the list is updated as the refactors land.

    python tools/check_sizes.py          # exit 1 listing every problem
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("queue_core", "backends")
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60

# path -> lines when allow-listed (2026-11-30). Shrink, never grow.
FILE_ALLOW: dict[str, int] = {}

# "path::Qualified.name" -> lines when allow-listed (2026-11-30). Shrink, never grow.
FUNCTION_ALLOW: dict[str, int] = {
    "queue_core/rules/retry.py::policy_from_options": 66,
}


def _functions(
    tree: ast.AST, prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{node.name}", node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the end, minus the docstring."""
    end = node.end_lineno or node.lineno
    size = end - node.lineno + 1
    first = node.body[0] if node.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        size -= (first.end_lineno or first.lineno) - first.lineno + 1
    return size


def measure(root: Path = ROOT) -> tuple[dict[str, int], dict[str, int]]:
    """Every file's and every function's size under the checked packages."""
    files: dict[str, int] = {}
    functions: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            text = path.read_text(encoding="utf-8")
            files[rel] = len(text.splitlines())
            for name, node in _functions(ast.parse(text, filename=rel)):
                key = f"{rel}::{name}"
                # Same-named nested helpers (or overloads): keep the largest.
                functions[key] = max(functions.get(key, 0), function_lines(node))
    return files, functions


def _judge(kind: str, sizes: dict[str, int], allow: dict[str, int], limit: int) -> list[str]:
    problems: list[str] = []
    for name, size in sorted(sizes.items()):
        if size <= limit:
            continue
        if name not in allow:
            problems.append(f"{name}: {kind} has {size} lines (limit {limit})")
        elif size > allow[name]:
            problems.append(
                f"{name}: allow-listed {kind} grew from {allow[name]} to {size} lines "
                f"(limit {limit}): shrink it"
            )
    for name, recorded in sorted(allow.items()):
        if sizes.get(name, 0) <= limit:
            problems.append(
                f"{name}: {kind} is no longer over {limit} lines (was {recorded}): "
                "remove it from the allow-list in tools/check_sizes.py"
            )
    return problems


def check(
    root: Path = ROOT,
    file_allow: dict[str, int] | None = None,
    function_allow: dict[str, int] | None = None,
) -> list[str]:
    """Every problem, as one line each (empty: the gate passes)."""
    files, functions = measure(root)
    file_allow = FILE_ALLOW if file_allow is None else file_allow
    function_allow = FUNCTION_ALLOW if function_allow is None else function_allow
    return _judge("file", files, file_allow, MAX_FILE_LINES) + _judge(
        "function", functions, function_allow, MAX_FUNCTION_LINES
    )


def main() -> int:
    problems = check()
    for problem in problems:
        print(problem, file=sys.stderr)
    files, functions = measure()
    print(
        f"sizes: {len(files)} files, {len(functions)} functions checked; "
        f"{len(FILE_ALLOW) + len(FUNCTION_ALLOW)} allow-listed; {len(problems)} problem(s)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
