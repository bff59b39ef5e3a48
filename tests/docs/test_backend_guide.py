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
import importlib
import importlib.util
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


# --------------------------------------------------------------------------- the tables

TOOLS = ROOT / "tools"
RULE_MODULES = (
    "queue_core.rules",
    "queue_core.app.job_ids",
    "queue_core.rules.throughput",
    "queue_core.records.workers",
    "queue_core.storage.flows",
    "queue_core.rules.flows.decide_fast",
    "queue_core.storage.urls",
    "queue_core.records.durations",
)


def _section(title: str) -> str:
    text = GUIDE.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _rows(section: str) -> list[list[str]]:
    rows = [line.strip("|").split(" | ") for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows[1:]]  # without the header


def _rules() -> dict[str, str]:
    """Each call of the "Call these" table, by name, with the module it is imported from."""
    found: dict[str, str] = {}
    for row in _rows(_section("2. Call these")):
        module = row[1].strip("`")
        for name in re.findall(r"`([A-Za-z_][\w.]*)", row[0]):
            found[name] = module
    return found


def _resolve(path: str) -> object:
    module, _, rest = path.partition(":")
    obj: object = importlib.import_module(module)
    for attr in rest.split("."):
        obj = getattr(obj, attr)
    return obj


def test_every_rule_the_guide_names_exists_where_it_says() -> None:
    rules = _rules()
    shared = {"end_state", "reap_verdict", "reap_ready_at", "replay_job", "parse_retention"}
    assert shared | {"schedule_to_start_expired", "DeadJob.build", "RenewResult.of"} <= set(rules)
    for name, module in rules.items():
        try:
            found = _resolve(f"{module}:{name}")
        except (ImportError, AttributeError):
            pytest.fail(f"the guide says to import {name} from {module}: it is not there")
        assert found is not None, name


def _is_module(package: str, name: str) -> bool:
    """Whether ``from package import name`` imports a submodule (``decide``, ``plan``)."""
    parent = importlib.import_module(package)
    if not hasattr(parent, "__path__") or not name.islower():
        return False
    return importlib.util.find_spec(f"{package}.{name}") is not None


def test_the_guide_names_every_rule_the_in_repo_backends_call() -> None:
    """Whatever an in-repo backend imports from a rules module, or calls on
    ``decide`` / ``RenewResult`` / ``DeadJob``, is in the "Call these" table."""
    used: set[str] = set()
    for path in (ROOT / "backends").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(RULE_MODULES):
                used |= {
                    a.name
                    for a in node.names
                    if (a.name[0].islower() or a.name.isupper())
                    and not _is_module(node.module or "", a.name)  # `decide`, `plan`
                }
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("decide", "RenewResult", "DeadJob")
                and not node.attr.startswith("_")
                and node.attr[0].islower()
            ):
                used.add(f"{node.value.id}.{node.attr}")
    missing = sorted(used - set(_rules()))
    assert missing == [], f"rules the in-repo backends call that the guide does not name: {missing}"


def test_the_ability_table_lists_every_ability_with_its_module_and_page() -> None:
    sys.path.insert(0, str(TOOLS))
    try:
        import storage_reference
    finally:
        sys.path.remove(str(TOOLS))
    abilities = storage_reference.abilities()
    listed: dict[str, str] = {}
    for row in _rows(_section("6. Optional abilities")):
        match = re.fullmatch(r"\[`(Supports\w+)`\]\(backend-abilities/([\w-]+\.md)\)", row[0])
        assert match, row
        name, page = match.groups()
        assert page == storage_reference.page_of(name), (name, page)
        assert (GUIDE.parent / "backend-abilities" / page).exists(), page
        listed[name] = row[1].strip("`")
    assert set(listed) == set(abilities), set(listed) ^ set(abilities)
    for name, module in listed.items():
        assert abilities[name].__module__ == module, f"{name} lives in {abilities[name].__module__}"
        assert getattr(importlib.import_module(module), name) is abilities[name]


def test_the_guide_names_queue_with_a_storage_instance() -> None:
    assert "Queue(storage=MyStorage(" in GUIDE.read_text()
