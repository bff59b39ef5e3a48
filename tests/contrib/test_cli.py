"""The ``queue-core`` CLI driven through click's CliRunner against a real SQLite file."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from queue_core import AttemptRecord, DeadJob, JobInfo, JobState, Queue
from tests.contrib.conftest import App, Populated

DEAD_FIELDS = {f.name for f in dataclasses.fields(DeadJob)}
ATTEMPT_FIELDS = {f.name for f in dataclasses.fields(AttemptRecord)}
INFO_FIELDS = {f.name for f in dataclasses.fields(JobInfo)}


# --------------------------------------------------------------------------- basics


def test_version_and_help(run):
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("queue-core, version ")
    helped = run("--help")
    assert helped.exit_code == 0
    for command in ("worker", "enqueue", "dlq", "stats", "jobs", "migrate"):
        assert command in helped.stdout


def test_unknown_option_is_a_usage_error(run):
    result = run("stats", "--no-such-option")
    assert result.exit_code == 2
    assert "--no-such-option" in result.stderr


# --------------------------------------------------------------------------- enqueue


def test_enqueue_prints_the_job_id_and_a_worker_runs_it(run, app: App):
    result = run("enqueue", "app.add", "[2]", "--kwargs", '{"b": 40}', "--priority", "7",
                 "--queue", "default", "--app", app.spec)
    assert result.exit_code == 0, result.stderr
    job_id = result.stdout.strip()
    assert len(job_id) >= 16 and "\n" not in job_id
    info = app.queue.job(job_id).info()
    assert (info.task_name, info.queue, info.priority, info.state) == (
        "app.add", "default", 7, JobState.QUEUED)
    app.queue.run_worker(burst=True, slots=2)
    assert app.queue.job(job_id).result(timeout=5) == 42


def test_enqueue_with_delay_is_scheduled_not_ready(run, app: App):
    result = run("enqueue", "app.add", "[1]", "--delay", "1h", "--app", app.spec)
    assert result.exit_code == 0, result.stderr
    stats = {s.queue: s for s in app.queue.stats()}
    assert stats["default"].scheduled == 1
    assert stats["default"].ready == 0


def test_enqueue_stores_the_options_the_app_declares(run, app: App):
    result = run("enqueue", "app.flaky_forever", "--app", app.spec)
    assert result.exit_code == 0, result.stderr
    rec = app.queue.storage().get_job(result.stdout.strip())
    assert rec.max_attempts == 2  # max_retries=1 from the decorator, not the queue default


def test_enqueue_without_the_app_refuses_unless_allowed(run, app: App):
    refused = run("enqueue", "app.flaky_forever", "--url", app.url)
    assert refused.exit_code == 2
    assert "unknown task 'app.flaky_forever'" in refused.stderr
    assert "--app MODULE:ATTR" in refused.stderr and "--allow-unregistered" in refused.stderr
    assert sum(s.ready + s.scheduled for s in app.queue.stats()) == 0
    unknown_in_app = run("enqueue", "app.nope", "--app", app.spec)
    assert unknown_in_app.exit_code == 2 and "unknown task 'app.nope'" in unknown_in_app.stderr
    assert "app.add" in unknown_in_app.stderr  # names what the app does declare

    allowed = run("enqueue", "app.flaky_forever", "--url", app.url, "--allow-unregistered")
    assert allowed.exit_code == 0, allowed.stderr
    rec = app.queue.storage().get_job(allowed.stdout.strip())
    assert (rec.task_name, rec.max_attempts) == ("app.flaky_forever", 1)  # queue defaults


def test_enqueue_rejects_bad_json_and_stores_nothing(run, app: App):
    bad = run("enqueue", "app.add", "[1, 2", "--url", app.url)
    assert bad.exit_code == 2
    assert "ARGS_JSON" in bad.stderr and "'[1, 2'" in bad.stderr
    not_array = run("enqueue", "app.add", '{"a": 1}', "--url", app.url)
    assert not_array.exit_code == 2
    assert "expected a JSON array" in not_array.stderr
    bad_kwargs = run("enqueue", "app.add", "[1]", "--kwargs", "[1]", "--url", app.url)
    assert bad_kwargs.exit_code == 2
    assert "--kwargs" in bad_kwargs.stderr and "JSON object" in bad_kwargs.stderr
    bad_delay = run("enqueue", "app.add", "[1]", "--delay", "soon", "--app", app.spec)
    assert bad_delay.exit_code == 2
    assert "'soon'" in bad_delay.stderr
    for misfit, words in [
        (["[]"], "missing a required argument: 'a'"),
        (["[1, 2, 3]"], "too many positional arguments"),
        (["[1]", "--kwargs", '{"c": 1}'], "unexpected keyword argument 'c'"),
    ]:
        got = run("enqueue", "app.add", *misfit, "--app", app.spec)
        assert got.exit_code == 2, got.stderr
        assert words in got.stderr and "Traceback" not in got.stderr, got.stderr
    assert sum(s.ready + s.scheduled for s in app.queue.stats()) == 0


# --------------------------------------------------------------------------- dlq


def test_dlq_list_pages_and_says_how_to_get_the_next_page(run, populated: Populated):
    url = populated.app.url
    first = run("dlq", "list", "--task", "app.explode", "--limit", "2", "--url", url)
    assert first.exit_code == 0, first.stderr
    # the hint keeps the storage it was given (issue 23 item 14)
    assert f"dlq list --offset 2 --limit 2 --task app.explode --url {url}" in first.stdout
    by_app = run("dlq", "list", "--limit", "1", "--app", populated.app.spec)
    assert f"dlq list --offset 1 --limit 1 --app {populated.app.spec}\n" in by_app.stdout
    rows = [line for line in first.stdout.splitlines() if "app.explode" in line
            and "dlq list" not in line]
    assert len(rows) == 2
    assert all("fatal" in r and "TaskError" in r for r in rows)
    last = run("dlq", "list", "--task", "app.explode", "--limit", "2", "--offset", "2",
               "--url", url)
    assert last.exit_code == 0
    assert "no more entries" in last.stdout
    assert "Entries 3-3" in last.stdout


def test_dlq_list_json_has_the_deadjob_fields(run, populated: Populated):
    result = run("dlq", "list", "--json", "--url", populated.app.url)
    assert result.exit_code == 0, result.stderr
    entries = json.loads(result.stdout)
    assert len(entries) == 4
    assert all(set(e) >= DEAD_FIELDS - {"payload"} for e in entries)
    by_task: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        by_task.setdefault(e["task_name"], []).append(e)
    assert sorted(e["job_id"] for e in by_task["app.explode"]) == sorted(populated.explode_ids)
    flaky = by_task["app.flaky_forever"][0]
    assert flaky["reason"] == "retries_exhausted"
    assert flaky["error_class"] == "ValueError"
    assert [a["outcome"] for a in flaky["attempts"]] == ["failed", "failed"]
    assert set(flaky["attempts"][0]) >= ATTEMPT_FIELDS
    assert {tuple(e["args"]) for e in by_task["app.explode"]} == {(0,), (1,), (2,)}
    filtered = json.loads(run("dlq", "list", "--json", "--task", "app.flaky_forever",
                              "--url", populated.app.url).stdout)
    assert [e["job_id"] for e in filtered] == [populated.flaky_id]


def test_dlq_show_prints_every_attempt(run, populated: Populated):
    entry = populated.app.queue.dead_letters(task_name="app.flaky_forever")[0]
    shown = run("dlq", "show", entry.id, "--url", populated.app.url)
    assert shown.exit_code == 0, shown.stderr
    assert "retries_exhausted" in shown.stdout
    assert "Attempts (2):" in shown.stdout
    assert "still broken" in shown.stdout
    assert "Traceback" in shown.stdout
    as_json = json.loads(run("dlq", "show", entry.id, "--json", "--url", populated.app.url).stdout)
    assert as_json["id"] == entry.id
    assert as_json["job_id"] == populated.flaky_id
    assert [a["number"] for a in as_json["attempts"]] == [1, 2]
    assert all(a["error_type"] == "builtins.ValueError" for a in as_json["attempts"])


def test_dlq_show_unknown_id_exits_1_naming_it(run, app: App):
    app.queue.migrate()
    result = run("dlq", "show", "no-such-dead-id", "--url", app.url)
    assert result.exit_code == 1
    assert "no-such-dead-id" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_dlq_retry_replays_with_a_fresh_budget(run, populated: Populated):
    q = populated.app.queue
    entry = q.dead_letters(task_name="app.explode")[0]
    # any unique prefix of the entry's id names it (issue 23 item 5)
    result = run("dlq", "retry", entry.id[:10], "--queue", "replays", "--url", populated.app.url)
    assert result.exit_code == 0, result.stderr
    said, _, new_id = result.stdout.strip().rpartition(" ")
    assert said == f"replayed {entry.id} as job"
    assert new_id != entry.job_id
    info = q.job(new_id).info()
    assert (info.state, info.queue, info.replay_of, info.attempts) == (
        JobState.QUEUED, "replays", entry.id, 0)
    assert q.dead_letter(entry.id) is None
    again = run("dlq", "retry", entry.id, "--url", populated.app.url)
    assert again.exit_code == 1
    assert entry.id in again.stderr


def test_id_arguments_take_any_unique_prefix(run, populated: Populated):
    # time-ordered job ids share their head: the prefix that names one job is longer
    url = populated.app.url
    q = populated.app.queue
    job_id = populated.succeeded_id
    others = [j.id for j in q.storage().list_jobs(limit=100) if j.id != job_id]
    unique = next(n for n in range(1, 33) if not any(o.startswith(job_id[:n]) for o in others))
    shown = run("jobs", "show", job_id[:unique], "--json", "--url", url)
    assert shown.exit_code == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == job_id
    ambiguous = run("jobs", "show", job_id[: unique - 1], "--url", url)
    assert ambiguous.exit_code == 2
    assert f"id prefix {job_id[: unique - 1]!r} is ambiguous" in ambiguous.stderr
    assert "give more characters" in ambiguous.stderr
    cancel = run("jobs", "cancel", job_id[:unique], "--url", url)
    assert cancel.exit_code == 1 and "had already finished (succeeded)" in cancel.stderr
    entry = q.dead_letters(task_name="app.explode")[0]
    dead = run("dlq", "show", entry.id[:12], "--json", "--url", url)
    assert dead.exit_code == 0 and json.loads(dead.stdout)["id"] == entry.id
    nothing = run("jobs", "show", "ffff", "--url", url)
    assert nothing.exit_code == 1
    assert "no job with id 'ffff' or an id starting with it" in nothing.stderr


def test_dlq_purge_asks_first(run, populated: Populated, monkeypatch):
    import contrib.cli.bulk

    monkeypatch.setattr(contrib.cli.bulk, "stdin_is_interactive", lambda: True)  # a terminal
    url = populated.app.url
    declined = run("dlq", "purge", "--task", "app.explode", "--url", url, input="n\n")
    assert declined.exit_code == 1
    assert len(populated.app.queue.dead_letters(limit=100)) == 4
    recent = run("dlq", "purge", "--older-than", "1h", "--yes", "--url", url)
    assert recent.exit_code == 0
    assert "Purged 0 dead-letter entries" in recent.stdout
    accepted = run("dlq", "purge", "--task", "app.explode", "--url", url, input="y\n")
    assert accepted.exit_code == 0, accepted.stderr
    assert "Purged 3 dead-letter entries" in accepted.stdout
    left = populated.app.queue.dead_letters(limit=100)
    assert [e.task_name for e in left] == ["app.flaky_forever"]
    assert run("dlq", "purge", "--yes", "--url", url).stdout.strip() == (
        "Purged 1 dead-letter entry.")


def test_dlq_purge_rejects_a_bad_duration_before_asking(run, app: App):
    result = run("dlq", "purge", "--older-than", "7 days", "--url", app.url)
    assert result.exit_code == 2
    assert "'7 days'" in result.stderr
    assert "Delete" not in result.stderr


# --------------------------------------------------------------------------- stats / jobs


def test_stats_table_and_json(run, populated: Populated):
    rows = json.loads(run("stats", "--json", "--url", populated.app.url).stdout)
    default = next(r for r in rows if r["queue"] == "default")
    assert default["succeeded"] == 1
    assert default["dead"] == 4
    assert default["queued"] == 0 and default["running"] == 0
    stats = next(s for s in populated.app.queue.stats() if s.queue == "default")
    fields = dataclasses.asdict(stats)
    assert {k: default[k] for k in fields} == fields  # every QueueStats field, by its name
    populated.app.queue.enqueue("app.add", args=(1,))
    populated.app.queue.enqueue("app.add", args=(1,), delay="1h")
    table = run("stats", "--url", populated.app.url)
    assert table.exit_code == 0
    header, _rule, *body = table.stdout.splitlines()
    # the job states, with queued split into due (ready now) and scheduled (run_at later)
    assert header.split() == ["queue", "queued", "due", "scheduled", "running", "succeeded",
                              "dead", "cancelled", "skipped", "timed_out"]
    assert body[0].split()[:7] == ["default", "2", "1", "1", "0", "1", "4"]


def test_jobs_show_info_and_attempts(run, populated: Populated):
    url = populated.app.url
    data = json.loads(run("jobs", "show", populated.flaky_id, "--json", "--url", url).stdout)
    assert set(data) == INFO_FIELDS | {"attempt_records", "progress"}
    assert data["state"] == "dead" and data["attempts"] == 2
    assert [a["outcome"] for a in data["attempt_records"]] == ["failed", "failed"]
    ok = run("jobs", "show", populated.succeeded_id, "--url", url)
    assert ok.exit_code == 0
    assert "succeeded" in ok.stdout and "Attempts (1):" in ok.stdout
    assert "Traceback" not in ok.stdout
    # a failed job's traceback, as dlq show prints it (issue 23 item 4)
    dead = run("jobs", "show", populated.flaky_id, "--url", url)
    assert ("Traceback of the last failed attempt:\nTraceback (most recent call last):"
            in dead.stdout)
    assert dead.stdout.rstrip().endswith("ValueError: still broken")
    missing = run("jobs", "show", "nope", "--url", url)
    assert missing.exit_code == 1
    assert "'nope'" in missing.stderr


def test_migrate_is_idempotent_and_says_what_it_did(run, app: App):
    from backends.sql.schema import SCHEMA_VERSION

    said = []
    for _ in range(2):
        result = run("migrate", "--url", app.url)
        assert result.exit_code == 0, result.stderr
        said.append(result.stdout.strip())
    # a new database: "created", then "up to date" (issue 23 item 13)
    assert said == [f"Schema created, version {SCHEMA_VERSION} ({app.url}).",
                    f"Schema is up to date, version {SCHEMA_VERSION} ({app.url})."]


def test_migrate_says_when_a_storage_has_nothing_to_migrate(run):
    result = run("migrate", "--url", "memory://")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == (
        "Nothing to migrate: MemoryStorage (memory://) keeps no schema "
        "(it does not implement SupportsMigrate)."
    )


# --------------------------------------------------------------------------- storage lookup


def test_storage_from_app_then_url_then_env(run, populated: Populated, tmp_path):
    other = f"sqlite:///{tmp_path / 'other.db'}"
    by_app = json.loads(run("dlq", "list", "--json", "--app", populated.app.spec,
                            "--url", other).stdout)
    assert len(by_app) == 4  # --app wins over --url
    by_url = run("dlq", "list", "--json", "--url", other)
    assert by_url.exit_code == 1 and "does not exist" in by_url.stderr  # and is not created
    assert not (tmp_path / "other.db").exists()
    by_env = run("dlq", "list", "--json", env={"QUEUE_CORE_URL": populated.app.url})
    assert len(json.loads(by_env.stdout)) == 4
    group_level = run("--url", populated.app.url, "dlq", "list", "--json")
    assert len(json.loads(group_level.stdout)) == 4


def test_default_storage_is_queue_core_db_in_the_working_directory(run, app: App):
    result = run("enqueue", "app.add", "[1]", "--allow-unregistered")
    assert result.exit_code == 0, result.stderr
    assert (app.dir / "queue_core.db").exists()
    default_queue = Queue(f"sqlite:///{app.dir / 'queue_core.db'}")
    try:
        assert default_queue.job(result.stdout.strip()).status() is JobState.QUEUED
    finally:
        default_queue.close()


def test_bad_url_is_exit_2_with_the_password_masked(run):
    result = run("stats", "--url", "bogus://admin:hunter2@db.example:5432/x")
    assert result.exit_code == 2
    assert "hunter2" not in result.stderr + result.stdout
    assert "bogus" in result.stderr and "***" in result.stderr
    assert "sqlite" in result.stderr  # names the supported schemes


# --------------------------------------------------------------------------- worker


def test_worker_burst_runs_the_queue(run, app: App):
    job = app.queue.enqueue("app.add", args=(20, 22))
    result = run("worker", app.spec, "--burst", "--slots", "2", "--reap-interval", "0.5",
                 "--lease", "10")
    assert result.exit_code == 0, result.stderr
    assert app.queue.job(job.id).result(timeout=1) == 42


def test_worker_only_takes_the_named_queues(run, app: App):
    mine = app.queue.enqueue("app.add", args=(1,), queue="mine")
    other = app.queue.enqueue("app.add", args=(2,), queue="other")
    result = run("worker", app.spec, "--burst", "--queues", "mine")
    assert result.exit_code == 0, result.stderr
    assert app.queue.job(mine.id).status() is JobState.SUCCEEDED
    assert app.queue.job(other.id).status() is JobState.QUEUED


def test_worker_bad_app_is_a_clear_usage_error(run, app: App):
    cases = {
        "nocolon_missing_module": "no module named 'nocolon_missing_module'",
        f"{app.module_name}:missing": "has no attribute 'missing'",
        f"{app.module_name}:not_a_queue": "is a int, not a queue_core.Queue",
        f"{app.module_name}:": "expected module:attribute",
    }
    for spec, message in cases.items():
        result = run("worker", spec, "--burst")
        assert result.exit_code == 2, (spec, result.stdout, result.stderr)
        assert message in result.stderr, (spec, result.stderr)
        assert repr(spec) in result.stderr
    bad_slots = run("worker", app.spec, "--slots", "0")
    assert bad_slots.exit_code == 2
    assert "--slots" in bad_slots.stderr
