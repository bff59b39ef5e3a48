"""What a new user reads first (issue 23 items 10 and 16): the README goes install ->
quick start -> guides before the contributor commands, lists every extra, and ``[all]``
means all; the guides cite guide sections, not the product spec users do not have."""

from __future__ import annotations

import importlib
import re
import sys

from tests.docs.markdown_blocks import PAGES, ROOT

DEVELOPER_EXTRAS = {"test", "lint", "docs"}


def _extras() -> dict[str, list[str]]:
    toml = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")
    data = toml.loads((ROOT / "pyproject.toml").read_text())
    extras: dict[str, list[str]] = data["project"]["optional-dependencies"]
    return extras


def _requirements(extra: str, extras: dict[str, list[str]]) -> set[str]:
    """The requirements ``extra`` brings, its ``queue-core[...]`` references expanded."""
    found: set[str] = set()
    for req in extras[extra]:
        own = re.fullmatch(r"queue-core\[([\w,]+)\]", req)
        if own:
            for name in own.group(1).split(","):
                found |= _requirements(name, extras)
        else:
            found.add(req)
    return found


def test_all_means_every_user_extra() -> None:
    extras = _extras()
    users = set(extras) - DEVELOPER_EXTRAS - {"all"}
    assert {"flows", "dashboard", "postgres", "redis", "aws", "otel"} <= users
    everything = set().union(*(_requirements(e, extras) for e in users))
    assert _requirements("all", extras) == everything


def test_the_readme_install_lists_every_extra() -> None:
    readme = (ROOT / "README.md").read_text()
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    for extra in set(_extras()) - DEVELOPER_EXTRAS:
        assert re.search(rf'\.\[{extra}\]"|`{extra}`', install), extra


def test_the_readme_reads_install_quick_start_guides_then_contributing() -> None:
    heads = re.findall(r"^## (.+)$", (ROOT / "README.md").read_text(), re.M)
    order = [heads.index(h) for h in ("Install", "Quick start", "Documentation")]
    assert order == sorted(order)
    contributing = next(i for i, h in enumerate(heads) if h.startswith("Contributing"))
    assert contributing > heads.index("Documentation")
    # the CI commands are in that section, not before the guides
    readme = (ROOT / "README.md").read_text()
    assert readme.index("bash .ci/run") > readme.index("## Documentation")


def test_user_pages_cite_guides_not_the_spec() -> None:
    pages = [*PAGES, *sorted((ROOT / "docs" / "reference").glob("*.md"))]
    cited = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in pages
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "SPEC §" in line
    ]
    assert cited == []
