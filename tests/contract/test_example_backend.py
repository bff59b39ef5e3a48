"""The example third-party backend (examples/shelf-backend, ``shelf://``) keeps
docs/writing-a-backend.md true: it passes the published contract suite (its own test
module is collected here, and its project is also run the way its author runs it), it
works through ``Queue(storage=...)`` without registration, and its scheme is found
through its entry point once its metadata is installed -- and not before.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from queue_core import Queue

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the 3.10 fallback queue-core itself depends on
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shelf-backend"


def _load_the_authors_tests() -> type:
    """``TestShelfStorage`` from the example's own test module (``shelf_queue`` is
    importable here through ``pythonpath`` in pyproject.toml)."""
    path = EXAMPLE / "tests" / "test_contract.py"
    spec = importlib.util.spec_from_file_location("shelf_backend_test_contract", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: type = module.TestShelfStorage
    return found


TestShelfStorage = _load_the_authors_tests()


def _env(*paths: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "QUEUE_CORE_"))}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (*paths, ROOT))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def test_the_example_passes_the_contract_run_as_its_author_runs_it() -> None:
    """``pytest`` in the example's directory: every contract test passes or skips, and
    every skip names an optional ability and the module it lives in."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"],
        cwd=EXAMPLE,
        env=_env(EXAMPLE / "src"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    passed = re.search(r"(\d+) passed", out)
    assert passed is not None and int(passed.group(1)) >= 170, out
    skips = re.findall(r"^SKIPPED \[\d+\] \S+: (.*)$", out, re.MULTILINE)
    assert skips, out
    for reason in skips:
        lacks = r"storage lacks (Supports\w+) \((queue_core[\w.]*)\); "
        assert re.fullmatch(lacks + r"implement \2\.\1 to run this test", reason), reason


def test_queue_with_a_storage_instance_needs_no_registration(tmp_path: Path) -> None:
    from shelf_queue import ShelfStorage

    queue = Queue(storage=ShelfStorage(tmp_path / "queue.json"))

    @queue.task
    def add(a: int, b: int) -> int:
        return a + b

    job = add.delay(2, 3)
    queue.run_worker(burst=True)
    assert job.result(timeout=5) == 5


def _install_metadata(site: Path) -> None:
    """What ``pip install -e examples/shelf-backend`` leaves besides the path entry: a
    ``*.dist-info`` with the entry points declared in the example's pyproject.toml."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    lines = [f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items())
             for group, points in project["entry-points"].items()]  # fmt: skip
    (info / "entry_points.txt").write_text("\n".join(lines))


SCRIPT = """
import sys
from queue_core import ConfigError, Queue

url = sys.argv[1]
try:
    queue = Queue(url)
except ConfigError as exc:
    print("ConfigError", exc.code)
    raise SystemExit(0)

@queue.task
def add(a, b):
    return a + b

job = add.delay(20, 22)
queue.run_worker(burst=True)
print(type(queue.storage()).__name__, job.result(timeout=5))
"""


def test_the_scheme_is_found_through_installed_metadata_only(tmp_path: Path) -> None:
    url = f"shelf://{tmp_path / 'queue.json'}"
    src = EXAMPLE / "src"

    def run(*paths: Path) -> str:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, url],
            cwd=tmp_path,
            env=_env(*paths),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()

    assert run(src) == "ConfigError unknown_scheme"  # on the path, but not installed
    site = tmp_path / "site"
    _install_metadata(site)
    assert run(site, src) == "ShelfStorage 42"
    cli = subprocess.run(
        [sys.executable, "-m", "queue_core", "migrate", "--url", url],
        cwd=tmp_path,
        env=_env(site, src),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith("Nothing to migrate: ShelfStorage"), cli.stdout


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("shelf://relative/queue.json", "invalid_url"),
        ("shelf:///tmp/q.json?retention=soon", "invalid_duration"),
        ("shelf:///tmp/q.json?retentoin=1d", "invalid_option"),
    ],
)
def test_the_example_refuses_a_bad_url(url: str, code: str) -> None:
    from shelf_queue import ShelfStorage

    from queue_core.records.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        ShelfStorage.from_url(url)
    assert info.value.code == code


def test_the_example_type_checks_as_a_storage_and_a_storage_factory() -> None:
    """``class ShelfStorage(Storage)`` and ``_factory: StorageFactory = ShelfStorage``:
    mypy --strict checks every operation's signature and ``from_url``."""
    cache = ROOT / ".mypy_cache" / "example"
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--strict",
        "--no-error-summary",
        "--cache-dir",
        str(cache),
    ]
    done = subprocess.run(
        [*cmd, "src/shelf_queue", "tests"],
        cwd=EXAMPLE,
        env={**_env(EXAMPLE / "src"), "MYPYPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
