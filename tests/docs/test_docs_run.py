"""Every code block of README.md and docs/guides runs as written (see markdown_blocks.py),
and the README Quick start, followed literally, runs its job to success."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from queue_core import JobState, Queue
from tests.docs.markdown_blocks import PAGES, ROOT, Block, blocks, commands

RUNNER = Path(__file__).with_name("page_runner.py")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUE_CORE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    return env


def _run_page(page: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    spec = workdir.parent / f"{page.stem}.blocks.json"
    spec.write_text(json.dumps([b.to_json() for b in blocks(page) if b.runnable]))
    return subprocess.run(
        [sys.executable, str(RUNNER), str(spec)],
        cwd=workdir, env=_env(), capture_output=True, text=True, timeout=600,
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_block_of_the_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    result = _run_page(page, workdir)
    assert result.returncode == 0, (
        f"{page.relative_to(ROOT)}: a code block does not run as written\n"
        f"{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    )


def test_the_harness_fails_a_page_whose_block_does_not_run(tmp_path: Path) -> None:
    page = tmp_path / "broken.md"
    page.write_text(
        "```python\n# tasks.py\nVALUE = 41\n```\n\n"
        "```python\nfrom tasks import VALUE\nprint('0' * 32, VALUE + 1)\n```\n\n"
        "```bash\necho shown <job id>\nqueue-core jobs show <job id>\n```\n"
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    result = _run_page(page, workdir)
    assert result.returncode == 1
    assert f"$ echo shown {'0' * 32}" in result.stdout  # the placeholder was filled
    assert "DOC FAILURE at broken.md:11: queue-core jobs show" in result.stdout
    assert "does not exist" in result.stdout  # read-only command, no storage here
    assert (workdir / "tasks.py").read_text() == "# tasks.py\nVALUE = 41\n"
    assert not (workdir / "queue_core.db").exists()

    page.write_text("```bash skip-test\nfalse\n```\n")
    with pytest.raises(ValueError, match="'skip-test' needs a reason"):
        blocks(page)


def test_the_readme_demo_runs(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], cwd=tmp_path,
                            env=_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # the six jobs' short ids differ (time-ordered ids share their head: issue 23 item 5)
    section = result.stdout.split("What happened to each job:")[1].split("Dead-letter")[0]
    shown = re.findall(r"^  demo\.\w+\s+([0-9a-f]+)  state=", section, re.M)
    assert len(shown) == 6 and len(set(shown)) == 6, section


def test_skips_are_rare_and_say_why() -> None:
    skipped = [b for page in PAGES for b in blocks(page) if b.skip_reason is not None]
    runnable = [b for page in PAGES for b in blocks(page) if b.runnable]
    assert all(b.skip_reason for b in skipped)
    # only commands that install packages or are the test run itself are skipped
    for b in skipped:
        assert re.search(r"install|CI|test suite", b.skip_reason), b
    assert len(runnable) >= 3 * len(skipped)


def test_no_code_hides_in_an_untested_block() -> None:
    """Python or shell in a block without a runnable language would escape the harness."""
    for page in PAGES:
        for b in blocks(page):
            if b.lang in {"python", "bash", "sh", "console"}:
                continue
            assert not re.search(r"^\s*(from \w+ import|import \w+|@\w+\.task)", b.code, re.M), (
                f"{b.where}: a block with code needs a language (```python / ```bash)"
            )


def _quick_start() -> tuple[Block, Block]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    start = text[: text.index("## Quick start")].count("\n")
    in_section = [
        b for b in blocks(ROOT / "README.md")
        if start < b.line <= start + section.count("\n") + 1
    ]
    [code] = [b for b in in_section if b.lang == "python"]
    [shell] = [b for b in in_section if b.lang == "bash"]
    return code, shell


def test_readme_quick_start_followed_literally_runs_the_job(tmp_path: Path) -> None:
    code, shell = _quick_start()
    assert code.file_name == "tasks.py"
    (tmp_path / "tasks.py").write_text(code.code)
    lines = commands(shell)
    assert lines[0].split("#")[0].split() == ["python", "tasks.py"]
    worker = lines[1].split("#")[0].strip()
    assert worker.startswith("queue-core worker tasks:queue") and "--burst" in worker

    enqueued = subprocess.run(["bash", "-c", lines[0]], cwd=tmp_path, env=_env(),
                              capture_output=True, text=True, timeout=60)
    assert enqueued.returncode == 0, enqueued.stderr
    job_id, state = enqueued.stdout.split()[:2]
    assert state == "queued"
    ran = subprocess.run(["bash", "-c", worker], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr

    queue = Queue(f"sqlite:///{tmp_path / 'queue_core.db'}")
    try:
        info = queue.job(job_id).info()
        assert info.task_name == "tasks.send_welcome_email"  # not __main__.send_welcome_email
        assert info.state is JobState.SUCCEEDED, (info, ran.stderr[-3000:])
        assert info.result == "sent to a@example.com on attempt 1"
        assert queue.dead_letters(task_name="tasks.send_welcome_email")[0].reason == "fatal"
    finally:
        queue.close()


def test_readme_quick_start_type_checks_under_mypy_strict(tmp_path: Path) -> None:
    """A typed user copies the Quick start: ``mypy --strict`` finds nothing in it (a ``ctx``
    without ``= JobContext.INJECTED`` would make ``.delay(42, "a@example.com")`` an error)."""
    from mypy import api as mypy_api  # the lint extra; CI installs it with the test extra

    code, _ = _quick_start()
    (tmp_path / "tasks.py").write_text(code.code)
    out, err, status = mypy_api.run(
        ["--strict", "--no-error-summary", "--cache-dir", str(tmp_path / ".mypy_cache"),
         str(tmp_path / "tasks.py")]
    )
    assert (status, (out + err).strip()) == (0, "")


def test_a_yaml_block_headed_by_its_file_name_is_written_not_shown(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```yaml\n# flow.yaml\nid: x\n```\n\n```yaml\nid: shown-only\n```\n"
    )
    written, shown = blocks(page)
    assert (written.file_name, written.runnable) == ("flow.yaml", True)
    assert (shown.file_name, shown.runnable) == (None, False)
