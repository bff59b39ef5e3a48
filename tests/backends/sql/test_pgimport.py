"""backends.sql.postgresql imports psycopg with its versions read from the dist-info
directories instead of importlib.metadata, and the fallback when that is not possible."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backends.sql.postgresql import installed_version

ROOT = Path(__file__).resolve().parents[3]


def _site(tmp_path: Path, *dist_infos: str) -> Path:
    site = tmp_path / "site"
    (site / "fakepkg").mkdir(parents=True)
    (site / "fakepkg" / "__init__.py").write_text("")
    (site / "fakepkg_extra-9.9.dist-info").mkdir()  # another distribution: never matched
    for name in dist_infos:
        (site / name).mkdir()
    return site


@pytest.mark.parametrize(
    ("dist_infos", "expected"),
    [
        (("fakepkg-1.2.3.dist-info",), "1.2.3"),
        ((), None),  # editable / egg install: importlib.metadata decides
        (("fakepkg-1.2.3.dist-info", "fakepkg-1.2.4.dist-info"), None),  # two installs
    ],
)
def test_installed_version_reads_the_one_dist_info_beside_the_package(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    dist_infos: tuple[str, ...],
    expected: str | None,
) -> None:
    monkeypatch.syspath_prepend(str(_site(tmp_path, *dist_infos)))
    assert installed_version("fakepkg", "fakepkg") == expected
    assert "fakepkg" not in sys.modules  # found, not imported
    assert installed_version("no_such_package_qc", "no_such_package_qc") is None


def test_the_dialect_imports_psycopg_without_importlib_metadata_and_same_versions() -> None:
    code = """
import json, sys
import backends.sql.postgresql
import psycopg
out = {"metadata": "importlib.metadata" in sys.modules, "psycopg": psycopg.__version__,
       "attr": psycopg.version.__version__, "impl": psycopg.pq.__impl__,
       "again": backends.sql.postgresql.psycopg is psycopg}
if "psycopg_binary" in sys.modules:
    out["binary"] = sys.modules["psycopg_binary"].__version__
from importlib.metadata import version
out["expected"] = version("psycopg")
if "binary" in out:
    out["expected_binary"] = version("psycopg-binary")
print(json.dumps(out))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["metadata"] is False, proc.stderr[-2000:]
    assert out["psycopg"] == out["attr"] == out["expected"]
    assert out["again"] is True
    if out["impl"] == "binary":
        assert out["binary"] == out["expected_binary"]
