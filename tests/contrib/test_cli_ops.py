"""The operations commands of the CLI: ``jobs list``, ``jobs cancel``, ``dlq retry --all``,
``dlq purge`` (count, confirmation, progress) and ``worker --shutdown-grace``, driven
through click's CliRunner against a real SQLite file."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

import contrib.cli.bulk as bulk
import contrib.cli.common as commands
from queue_core import JobInfo, JobState, Queue
from queue_core.storage.abilities import SupportsJobScan
from tests.contrib.conftest import App, Populated

INFO_FIELDS = [f.name for f in dataclasses.fields(JobInfo)]


@pytest.fixture
def interactive(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if a person sat at a terminal: prompts may be answered (CliRunner feeds input)."""
    monkeypatch.setattr(bulk, "stdin_is_interactive", lambda: True)


@pytest.fixture
def bar_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if stderr were a terminal: the commands take their progress-bar path."""
    monkeypatch.setattr(commands, "show_progress", lambda as_json: not as_json)


def _many_dead(app: App, n: int, task: str = "app.explode") -> None:
    for i in range(n):
        app.queue.enqueue(task, args=(i,) if task == "app.explode" else ())
    app.queue.run_worker(burst=True, slots=4)


# --------------------------------------------------------------------------- jobs list


def test_jobs_list_pages_newest_first_with_the_next_page_command(run, populated: Populated):
    url = populated.app.url
    everything = json.loads(run("jobs", "list", "--limit", "100", "--json", "--url", url).stdout)
    assert len(everything) == 5
    assert all(list(row) == INFO_FIELDS for row in everything)  # JobInfo field names, in order
    by_id = {row["id"]: row for row in everything}
    assert by_id[populated.succeeded_id]["result"] == 5
    assert by_id[populated.succeeded_id]["state"] == "succeeded"
    assert by_id[populated.flaky_id]["attempts"] == 2

    first = run("jobs", "list", "--limit", "2", "--url", url)
    assert first.exit_code == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[0].split()[:4] == ["id", "task_name", "queue", "state"]
    assert [line.split()[0] for line in lines[2:4]] == [row["id"] for row in everything[:2]]
    assert ("Jobs 1-2; more exist. Next page: queue-core jobs list --offset 2 --limit 2 "
            f"--url {url}") in first.stdout
    before = run("--url", url, "jobs", "list", "--limit", "2")  # --url before the command
    assert f"--offset 2 --limit 2 --url {url}\n" in before.stdout
    last = run("jobs", "list", "--limit", "2", "--offset", "4", "--url", url)
    assert [line.split()[0] for line in last.stdout.splitlines()[2:3]] == [everything[4]["id"]]
    assert "Jobs 5-5; no more jobs." in last.stdout


def test_jobs_list_filters_by_state_and_queue(run, populated: Populated):
    url = populated.app.url
    dead = json.loads(run("jobs", "list", "--state", "dead", "--json", "--url", url).stdout)
    assert sorted(row["id"] for row in dead) == sorted([*populated.explode_ids, populated.flaky_id])
    assert {row["state"] for row in dead} == {"dead"}
    nowhere = run("jobs", "list", "--queue", "nowhere", "--json", "--url", url)
    assert json.loads(nowhere.stdout) == []
    empty = run("jobs", "list", "--state", "running", "--url", url)
    assert empty.exit_code == 0
    assert empty.stdout.startswith("No jobs (state 'running') at offset 0")
    bad = run("jobs", "list", "--state", "finished", "--url", url)
    assert bad.exit_code == 2
    assert "'finished' is not one of 'queued', 'running'" in bad.stderr


def test_jobs_list_task_filter_is_applied_by_the_cli_and_says_so(run, populated: Populated):
    url = populated.app.url
    page = run("jobs", "list", "--task", "app.explode", "--limit", "2", "--url", url)
    assert page.exit_code == 0, page.stderr
    ids = [line.split()[0] for line in page.stdout.splitlines()[2:4]]
    assert set(ids) <= set(populated.explode_ids) and len(set(ids)) == 2
    assert "--task app.explode" in page.stdout  # the next-page command keeps the filter
    assert "list_jobs cannot filter by task" in page.stdout

    as_json = run("jobs", "list", "--task", "app.explode", "--json", "--url", url)
    assert sorted(row["id"] for row in json.loads(as_json.stdout)) == sorted(populated.explode_ids)
    assert "list_jobs cannot filter by task, so the CLI read 5 jobs" in as_json.stderr

    # The scan is bounded: with --scan-limit 1 only the newest job is read.
    bounded = run("jobs", "list", "--task", "app.add", "--scan-limit", "1", "--url", url)
    assert bounded.exit_code == 0
    assert "No jobs (task 'app.add')" in bounded.stdout
    assert "stopped at --scan-limit 1: older jobs of task 'app.add' may exist" in bounded.stdout


class _NoScan:
    """A storage without the optional SupportsJobScan ability (delegates the rest)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "list_jobs":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_jobs_list_names_the_missing_ability(run, app: App):
    app.queue.enqueue("app.add", args=(1,))
    inner = Queue(app.url)
    storage = _NoScan(inner.storage())
    assert not isinstance(storage, SupportsJobScan)
    app.module.noscan = Queue(storage=storage)
    try:
        result = run("jobs", "list", "--app", f"{app.module_name}:noscan")
    finally:
        inner.close()
    assert result.exit_code == 1
    assert "lacks the optional SupportsJobScan ability (a list_jobs method)" in result.stderr
    assert result.stdout == ""


# --------------------------------------------------------------------------- jobs cancel


def test_jobs_cancel_a_queued_job(run, app: App):
    job = app.queue.enqueue("app.add", args=(1,))
    result = run("jobs", "cancel", job.id, "--url", app.url)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"Job {job.id} is cancelled."
    assert app.queue.job(job.id).status() is JobState.CANCELLED
    again = run("jobs", "cancel", job.id, "--json", "--url", app.url)  # idempotent
    assert again.exit_code == 0
    assert json.loads(again.stdout) == {"id": job.id, "state": "cancelled",
                                        "cancel_requested": False}


def test_jobs_cancel_a_running_job_requests_it(run, app: App):
    job = app.queue.enqueue("app.add", args=(1,))
    storage = app.queue.storage()
    [claimed] = storage.claim("test-worker", ["default"], 1, 60_000)
    assert claimed.id == job.id
    result = run("jobs", "cancel", job.id, "--url", app.url)
    assert result.exit_code == 0, result.stderr
    assert "is running: cancel requested" in result.stdout
    record = storage.get_job(job.id)
    assert record is not None
    assert (record.state, record.cancel_requested) == (JobState.RUNNING, True)
    as_json = run("jobs", "cancel", job.id, "--json", "--url", app.url)
    assert json.loads(as_json.stdout) == {"id": job.id, "state": "running",
                                          "cancel_requested": True}


def test_jobs_cancel_unknown_and_finished_jobs_exit_1(run, populated: Populated):
    url = populated.app.url
    unknown = run("jobs", "cancel", "no-such-job", "--url", url)
    assert unknown.exit_code == 1
    assert unknown.stderr.strip() == (
        f"Error: no job with id 'no-such-job' or an id starting with it ({url})"
    )
    done = run("jobs", "cancel", populated.succeeded_id, "--url", url)
    assert done.exit_code == 1
    assert "had already finished (succeeded): nothing to cancel" in done.stderr
    assert populated.app.queue.job(populated.succeeded_id).status() is JobState.SUCCEEDED


# --------------------------------------------------------------------------- dlq retry --all


def test_dlq_retry_all_of_a_task_replays_each_entry(run, populated: Populated):
    q = populated.app.queue
    url = populated.app.url
    result = run("dlq", "retry", "--all", "--task", "app.explode", "--yes", "--url", url)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == (
        "Retried 3 dead-letter entries of task 'app.explode' as new jobs.")
    left = q.dead_letters(limit=100)
    assert [e.task_name for e in left] == ["app.flaky_forever"]
    replays = [i for i in (q.job(r["id"]).info() for r in json.loads(
        run("jobs", "list", "--state", "queued", "--json", "--url", url).stdout))]
    assert len(replays) == 3
    assert all(i.task_name == "app.explode" and i.replay_of for i in replays)


def test_dlq_retry_all_json_and_entries_gone_meanwhile(
    run, populated: Populated, monkeypatch: pytest.MonkeyPatch
):
    q = populated.app.queue
    entries = q.dead_letters(limit=100)
    gone = entries[0].id
    real = Queue.retry_dead

    def retry_but_one_is_taken(self: Queue, dead_id: str, queue: str | None = None) -> str:
        if dead_id == gone:  # another operator replays it first
            real(self, dead_id, queue)
        return real(self, dead_id, queue)

    monkeypatch.setattr(Queue, "retry_dead", retry_but_one_is_taken)
    result = run("dlq", "retry", "--all", "--yes", "--json", "--queue", "replays",
                 "--url", populated.app.url)
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["missing"] == [gone]
    assert sorted(r["replay_of"] for r in out["retried"]) == sorted(e.id for e in entries[1:])
    # oldest first: the listing is newest first
    assert [r["replay_of"] for r in out["retried"]] == [e.id for e in reversed(entries[1:])]
    for r in out["retried"]:
        info = q.job(r["id"]).info()
        assert (info.replay_of, info.queue) == (r["replay_of"], "replays")
    assert q.dead_letters() == []


def test_dlq_retry_all_refuses_without_a_terminal_and_asks_with_one(
    run, populated: Populated, monkeypatch: pytest.MonkeyPatch
):
    url = populated.app.url
    q = populated.app.queue
    refused = run("dlq", "retry", "--all", "--url", url)
    assert refused.exit_code == 1
    assert "stdin is not a terminal" in refused.stderr and "--yes" in refused.stderr
    assert len(q.dead_letters(limit=100)) == 4

    monkeypatch.setattr(bulk, "stdin_is_interactive", lambda: True)
    declined = run("dlq", "retry", "--all", "--url", url, input="n\n")
    assert declined.exit_code == 1
    assert f"Retry 4 dead-letter entries from {url}? [y/N]" in declined.stderr
    assert len(q.dead_letters(limit=100)) == 4
    accepted = run("dlq", "retry", "--all", "--url", url, input="y\n")
    assert accepted.exit_code == 0, accepted.stderr
    assert "Retried 4 dead-letter entries as new jobs." in accepted.stdout
    assert q.dead_letters() == []
    nothing = run("dlq", "retry", "--all", "--url", url)  # nothing to confirm
    assert nothing.exit_code == 0
    assert nothing.stdout.startswith("No dead-letter entries to retry")


def test_dlq_retry_all_pages_past_one_listing_page(
    run, app: App, monkeypatch: pytest.MonkeyPatch, bar_shown: None
):
    monkeypatch.setattr(bulk, "PAGE", 3)
    _many_dead(app, 8)
    result = run("dlq", "retry", "--all", "--yes", "--url", app.url)
    assert result.exit_code == 0, result.stderr
    assert "Retried 8 dead-letter entries as new jobs." in result.stdout
    assert "Retrying" in result.stderr  # the bar's label (CliRunner's stderr is no terminal)
    assert app.queue.dead_letters() == []


def test_dlq_retry_usage_errors(run, populated: Populated):
    url = populated.app.url
    neither = run("dlq", "retry", "--url", url)
    assert neither.exit_code == 2 and "not neither" in neither.stderr
    both = run("dlq", "retry", "some-id", "--all", "--url", url)
    assert both.exit_code == 2 and "not both" in both.stderr
    task_alone = run("dlq", "retry", "some-id", "--task", "app.explode", "--url", url)
    assert task_alone.exit_code == 2 and "--task 'app.explode'" in task_alone.stderr
    assert len(populated.app.queue.dead_letters(limit=100)) == 4


def test_dlq_retry_one_with_json(run, populated: Populated):
    entry = populated.app.queue.dead_letters()[0]
    result = run("dlq", "retry", entry.id, "--json", "--url", populated.app.url)
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["replay_of"] == entry.id
    assert populated.app.queue.job(out["id"]).info().replay_of == entry.id


# --------------------------------------------------------------------------- dlq purge


def test_dlq_purge_refuses_without_a_terminal(run, populated: Populated):
    result = run("dlq", "purge", "--url", populated.app.url)
    assert result.exit_code == 1
    assert "stdin is not a terminal" in result.stderr and "--yes" in result.stderr
    assert len(populated.app.queue.dead_letters(limit=100)) == 4


def test_dlq_purge_prompt_says_how_many(run, populated: Populated, interactive: None):
    url = populated.app.url
    result = run("dlq", "purge", "--task", "app.explode", "--url", url, input="y\n")
    assert result.exit_code == 0, result.stderr
    assert f"Delete 3 dead-letter entries of task 'app.explode' from {url}?" in result.stderr
    assert result.stdout.strip() == "Purged 3 dead-letter entries."
    assert [e.task_name for e in populated.app.queue.dead_letters()] == ["app.flaky_forever"]
    recent = run("dlq", "purge", "--older-than", "1h", "--url", url)
    assert recent.exit_code == 0
    assert recent.stdout.startswith("No dead-letter entries dead for at least 1h to purge")


def test_dlq_purge_with_a_bar_deletes_in_chunks_oldest_first(
    run, app: App, monkeypatch: pytest.MonkeyPatch, bar_shown: None
):
    monkeypatch.setattr(bulk, "CHUNK", 3)
    monkeypatch.setattr(bulk, "PAGE", 4)
    _many_dead(app, 7)
    _many_dead(app, 2, task="app.flaky_forever")
    storage = app.queue.storage()
    calls: list[tuple[str | None, int | None, int]] = []
    real = type(storage).purge_dead

    def spy(self: Any, task_name: str | None = None, before: int | None = None) -> int:
        removed = real(self, task_name, before)
        calls.append((task_name, before, removed))
        return int(removed)

    monkeypatch.setattr(type(storage), "purge_dead", spy)
    result = run("dlq", "purge", "--task", "app.explode", "--yes", "--url", app.url)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "Purged 7 dead-letter entries."
    assert "Purging" in result.stderr
    assert sum(removed for _, _, removed in calls) == 7
    assert len(calls) >= 2 and calls[-1][1] is None  # chunks, then the user's own bound
    assert all(task == "app.explode" for task, _, _ in calls)
    times = [before for _, before, _ in calls[:-1]]
    assert times == sorted(times)  # oldest first
    assert [e.task_name for e in app.queue.dead_letters(limit=100)] == ["app.flaky_forever"] * 2


def test_dlq_purge_yes_without_a_terminal_is_one_call(
    run, populated: Populated, monkeypatch: pytest.MonkeyPatch
):
    calls: list[Any] = []
    real = Queue.purge_dead

    def spy(self: Queue, *args: Any, **kwargs: Any) -> int:
        calls.append((args, kwargs))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Queue, "purge_dead", spy)
    result = run("dlq", "purge", "--yes", "--url", populated.app.url)
    assert result.stdout.strip() == "Purged 4 dead-letter entries."
    assert calls == [((), {"task_name": None, "older_than": None})]
    assert result.stderr == ""  # no bar: stderr is not a terminal


def test_json_never_shows_a_bar(run, populated: Populated, bar_shown: None):
    result = run("dlq", "retry", "--all", "--yes", "--json", "--url", populated.app.url)
    assert result.exit_code == 0
    assert result.stderr == ""
    assert len(json.loads(result.stdout)["retried"]) == 4


# --------------------------------------------------------------------------- worker


def test_worker_shutdown_grace_reaches_the_worker(
    run, app: App, monkeypatch: pytest.MonkeyPatch
):
    from queue_core.worker import Worker

    seen: list[float] = []
    monkeypatch.setattr(Worker, "run", lambda self: seen.append(self.shutdown_grace))
    assert run("worker", app.spec, "--shutdown-grace", "2m").exit_code == 0
    assert run("worker", app.spec, "--shutdown-grace", "7.5").exit_code == 0
    assert run("worker", app.spec).exit_code == 0
    assert seen == [120.0, 7.5, 30.0]  # 30 s: the Worker's own default

    bad = run("worker", app.spec, "--shutdown-grace", "0")
    assert bad.exit_code == 2
    assert "--shutdown-grace" in bad.stderr and "'0'" in bad.stderr
    assert len(seen) == 3


# --------------------------------------------------------------------------- every backend


@pytest.mark.parametrize("url_fixture", ["postgres_url", "redis_url", "sqs_url"])
def test_ops_commands_on_every_server_backend(
    run, url_fixture: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
):
    from queue_core import TaskError

    url = request.getfixturevalue(url_fixture)
    q = Queue(url)
    try:
        @q.task(name="ops.ok")
        def ok(n: int) -> int:
            return n

        @q.task(name="ops.boom")
        def boom(n: int) -> None:
            raise TaskError.fatal(f"boom {n}")

        for i in range(5):
            boom.delay(i)
        done = ok.delay(1)
        q.run_worker(burst=True, slots=2)
        waiting = ok.delay(2)

        listed = run("jobs", "list", "--task", "ops.boom", "--json", "--url", url)
        assert listed.exit_code == 0, listed.stderr
        assert [r["state"] for r in json.loads(listed.stdout)] == ["dead"] * 5
        page = json.loads(run("jobs", "list", "--limit", "1", "--json", "--url", url).stdout)
        assert [r["id"] for r in page] == [waiting.id]
        assert json.loads(run("jobs", "list", "--state", "succeeded", "--json",
                              "--url", url).stdout)[0]["result"] == 1

        assert run("jobs", "cancel", waiting.id, "--url", url).exit_code == 0
        assert q.job(waiting.id).status() is JobState.CANCELLED
        assert run("jobs", "cancel", done.id, "--url", url).exit_code == 1

        monkeypatch.setattr(bulk, "PAGE", 2)
        retried = run("dlq", "retry", "--all", "--task", "ops.boom", "--yes", "--url", url)
        assert retried.exit_code == 0, retried.stderr
        assert "Retried 5 dead-letter entries" in retried.stdout
        assert q.dead_letters() == []
        q.run_worker(burst=True, slots=2)  # the replays die again: 5 new entries

        monkeypatch.setattr(bulk, "CHUNK", 2)
        monkeypatch.setattr(commands, "show_progress", lambda as_json: True)
        purged = run("dlq", "purge", "--yes", "--url", url)
        assert purged.exit_code == 0, purged.stderr
        assert purged.stdout.strip() == "Purged 5 dead-letter entries."
        assert q.dead_letters() == []
    finally:
        q.close()
