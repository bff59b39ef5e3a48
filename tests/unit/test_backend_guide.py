"""docs/writing-a-backend.md: its Python code runs on Python 3.10, the oldest supported.

The guide's blocks are checked four ways: they parse with the 3.10 grammar; they import
nothing from ``typing`` that 3.10 lacks; the backend block passes ``mypy --strict
--python-version 3.10`` (so ``MyStorage`` really is a ``Storage`` and a
``StorageFactory``); and the backend block is executed -- by this interpreter, and by a
Python 3.10 interpreter too when one is installed (``QUEUE_CORE_PY310``, ``python3.10`` on
the PATH, or a pyenv 3.10). The contract-suite block imports the reader's own package, so
it is only parsed and checked.
"""

from __future__ import annotations

import ast
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typing_extensions

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "writing-a-backend.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)

# Names the typing module gained after 3.10 (import them from typing_extensions).
TYPING_AFTER_310 = {
    "Self", "LiteralString", "Never", "Required", "NotRequired", "Unpack", "TypeVarTuple",
    "assert_never", "assert_type", "reveal_type", "dataclass_transform", "override",
    "TypeAliasType", "get_overloads", "clear_overloads", "ReadOnly", "TypeIs", "NoDefault",
    "get_protocol_members", "is_protocol",
}  # fmt: skip


def _blocks() -> list[str]:
    return BLOCK.findall(GUIDE.read_text())


def _backend_block() -> str:
    found = [b for b in _blocks() if "class MyStorage(Storage)" in b]
    assert len(found) == 1, "the guide should have exactly one block defining MyStorage"
    return found[0]


def _python310() -> str | None:
    """A working Python 3.10 interpreter, if this machine has one."""
    candidates = [os.environ.get("QUEUE_CORE_PY310")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python")))
    candidates += [shutil.which("python3.10")]
    for candidate in candidates:
        if not candidate or not os.access(candidate, os.X_OK):
            continue
        probe = [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 10))"]
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if done.stdout.strip() == "True":
            return candidate
    return None


def test_the_guide_has_its_code_blocks() -> None:
    blocks = _blocks()
    assert len(blocks) >= 2
    assert any("class TestMyStorage(StorageContract)" in b for b in blocks)


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_each_block_parses_with_the_310_grammar(index: int) -> None:
    source = _blocks()[index]
    ast.parse(source, filename=f"{GUIDE.name}[{index}]", feature_version=(3, 10))
    compile(source, f"{GUIDE.name}[{index}]", "exec", dont_inherit=True)


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_no_block_imports_typing_names_newer_than_310(index: int) -> None:
    tree = ast.parse(_blocks()[index])
    newer: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "typing":
            newer += [a.name for a in node.names if a.name in TYPING_AFTER_310]
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "typing"
            and node.attr in TYPING_AFTER_310
        ):
            newer.append(node.attr)
    assert newer == [], f"typing has no {newer} on Python 3.10: use typing_extensions"


def test_the_backend_block_type_checks_for_310(tmp_path: Path) -> None:
    module = tmp_path / "guide_backend.py"
    module.write_text(_backend_block())
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    cache = ROOT / ".mypy_cache" / "guide"
    cmd = [sys.executable, "-m", "mypy", "--strict", "--python-version", "3.10",
           "--cache-dir", str(cache), "--no-error-summary", str(module)]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


RUN_BACKEND = """
import sys
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"))
storage = MyStorage.from_url("mydb://user:secret@localhost/test")
assert isinstance(storage, MyStorage) and isinstance(storage, Storage), storage
assert "secret" not in repr(storage) and "***" in repr(storage), repr(storage)
print(sys.version_info[:2])
"""


def _interpreters() -> list[str]:
    found = _python310()
    return [sys.executable] + ([found] if found and found != sys.executable else [])


@pytest.mark.parametrize("python", _interpreters())
def test_the_backend_block_runs(python: str, tmp_path: Path) -> None:
    module = tmp_path / "guide_backend.py"
    module.write_text(_backend_block())
    # typing_extensions is a single pure-Python module: give a bare interpreter a copy.
    shutil.copy(typing_extensions.__file__, tmp_path / "typing_extensions.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    done = subprocess.run(
        [python, "-B", "-c", RUN_BACKEND, str(module)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
