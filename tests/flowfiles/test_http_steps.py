"""``type: http`` flow steps, templates and secrets (SPEC §7 "Flow files, the rest of the
Sluice format"), run by a real burst worker against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_core import ExecutionFailed, JobState, Outcome, Queue, RetryPolicy
from queue_core.app.steps.http import BODY_CAP
from queue_core.flows import ExecutionState, StepState
from tests.servers.http_echo import EchoServer, echo_server
from tests.servers.ports import free_port

ONCE = RetryPolicy(max_attempts=1)
TWICE = RetryPolicy(max_attempts=2, initial=0.01, jitter=0)
SECRET = "tok-3f9a/S3cret+value"


@pytest.fixture
def server() -> Iterator[EchoServer]:
    with echo_server() as s:
        yield s


@pytest.fixture
def queue() -> Iterator[Queue]:
    q = Queue("memory://")
    yield q
    q.close()


def drain(q: Queue, **options: Any) -> None:
    options.setdefault("http_hosts", ["127.0.0.1"])
    q.run_worker(burst=True, reap_interval=0.1, install_signal_handlers=False, **options)


def one_step(queue: Queue, url: str, *, retry: RetryPolicy = ONCE, **fields: Any) -> Any:
    flow = queue.flow(
        f"f{len(queue.executions(limit=1000))}-{fields.get('method', 'GET')}", retry=retry
    )
    flow.http("call", url, **fields)
    return flow


# --------------------------------------------------------------------------- statuses


@pytest.mark.parametrize(
    ("status", "expect", "ok"),
    [
        (200, (), True),
        (201, (), True),
        (299, (), True),
        (404, (), False),
        (500, (), False),
        (404, (404,), True),
        (200, (201, 204), False),
        (204, [201, 204], True),
    ],
)
def test_a_status_outside_expect_fails_with_http_status(
    queue: Queue, server: EchoServer, status: int, expect: Any, ok: bool
) -> None:
    run = one_step(queue, f"{server.url}/status/{status}", expect=expect).start()
    drain(queue)
    attempt = run.steps()[0].attempts[0]
    if ok:
        assert run.status() is ExecutionState.SUCCEEDED
        assert run.result(timeout=1)["call"] == ({"status": status} if status != 204 else "")
        return
    assert (attempt.outcome, attempt.reason) == (Outcome.FAILED, "http_status")
    assert f"answered {status}" in (attempt.message or "")
    assert attempt.error_class == "HttpStatusError"
    assert run.steps()[0].state is StepState.DEAD


def test_a_redirect_is_a_status_like_any_other(queue: Queue, server: EchoServer) -> None:
    refused = one_step(queue, f"{server.url}/redirect").start()
    accepted = one_step(queue, f"{server.url}/redirect", expect=302).start()
    drain(queue)
    assert refused.steps()[0].attempts[0].reason == "http_status"
    assert accepted.result(timeout=1) == {"call": ""}
    assert [r.path for r in server.seen()] == ["/redirect", "/redirect"]  # never followed


# --------------------------------------------------------------------------- requests


def test_methods_headers_and_bodies_are_sent_as_declared(queue: Queue, server: EchoServer) -> None:
    flow = queue.flow("sending", retry=ONCE)
    flow.http(
        "as_json",
        f"{server.url}/echo",
        method="POST",
        headers={"X-Day": "{{ input.day }}"},
        body={"day": "{{ input.day }}", "n": 3, "list": ["{{ execution_id }}", True]},
    )
    flow.http("as_text", f"{server.url}/echo", method="PUT", body="day={{ input.day }}\n")
    flow.http(
        "typed",
        f"{server.url}/echo",
        method="PATCH",
        body="<a/>",
        headers={"content-type": "application/xml"},
    )
    flow.http("head", f"{server.url}/echo", method="head")  # any case
    flow.http("text", f"{server.url}/text")
    run = flow.start({"day": "2026-11-30"})
    drain(queue)
    out = run.result(timeout=1)
    sent = out["as_json"]
    assert sent["method"] == "POST" and sent["headers"]["X-Day"] == "2026-11-30"
    assert sent["headers"]["Content-Type"] == "application/json"
    assert json.loads(sent["body"]) == {"day": "2026-11-30", "n": 3, "list": [run.id, True]}
    assert out["as_text"]["method"] == "PUT" and out["as_text"]["body"] == "day=2026-11-30\n"
    assert out["as_text"]["headers"]["Content-Type"] == "text/plain; charset=utf-8"
    assert {k.lower(): v for k, v in out["typed"]["headers"].items()}["content-type"] == (
        "application/xml"
    )
    assert out["head"] == "" and out["text"] == "hello"
    assert sorted(r.method for r in server.seen()) == ["GET", "HEAD", "PATCH", "POST", "PUT"]


def test_the_result_is_capped(queue: Queue, server: EchoServer) -> None:
    run = one_step(queue, f"{server.url}/big/{BODY_CAP + 5000}").start()
    drain(queue)
    result = run.result(timeout=5)["call"]
    assert result == "x" * BODY_CAP


def test_a_later_step_gets_the_result_in_a_template_and_as_a_parameter(
    queue: Queue, server: EchoServer
) -> None:
    flow = queue.flow("chained", retry=ONCE)
    flow.http("fetch-user", f"{server.url}/echo?user={{{{ input.user }}}}")
    flow.http(
        "post",
        f"{server.url}/echo",
        method="POST",
        depends_on=["fetch-user"],
        body={"seen": "{{ results['fetch-user'].path }}"},
    )

    @flow.step(depends_on=["post"])
    def check(post: dict[str, Any]) -> str:
        return str(json.loads(post["body"])["seen"])

    run = flow.start({"user": "ada"})
    drain(queue)
    assert run.result(timeout=1)["check"] == "/echo?user=ada"


# --------------------------------------------------------------------------- time, retries


def test_a_response_slower_than_the_step_timeout_times_the_attempt_out(
    queue: Queue, server: EchoServer
) -> None:
    run = one_step(queue, f"{server.url}/slow/5", timeout=1).start()
    drain(queue)
    step = run.steps()[0]
    attempt = step.attempts[0]
    assert (attempt.outcome, attempt.reason) == (Outcome.TIMED_OUT, "timeout")
    assert attempt.finished_at is not None and attempt.started_at is not None
    assert (attempt.finished_at - attempt.started_at).total_seconds() < 4
    assert step.state is StepState.DEAD and run.status() is ExecutionState.FAILED


def test_a_retry_renders_its_templates_again(queue: Queue, server: EchoServer) -> None:
    run = one_step(queue, f"{server.url}/flaky?attempt={{{{ attempt }}}}", retry=TWICE).start()
    drain(queue)
    attempts = run.steps()[0].attempts
    assert [(a.outcome, a.reason) for a in attempts] == [
        (Outcome.FAILED, "http_status"),
        (Outcome.SUCCEEDED, None),
    ]
    assert "answered 503" in (attempts[0].message or "")
    assert [r.path for r in server.seen()] == ["/flaky?attempt=1", "/flaky?attempt=2"]
    assert run.result(timeout=1)["call"]["path"] == "/flaky?attempt=2"


def test_a_template_error_fails_the_attempt_and_is_retried_by_the_policy(
    queue: Queue, server: EchoServer
) -> None:
    run = one_step(queue, f"{server.url}/echo?x={{{{ input.missing }}}}", retry=TWICE).start({})
    drain(queue)
    step = run.steps()[0]
    assert [(a.outcome, a.reason) for a in step.attempts] == [
        (Outcome.FAILED, "template_error")
    ] * 2
    assert "missing" in (step.attempts[0].message or "")
    assert step.state is StepState.DEAD and step.reason == "retries_exhausted"
    assert server.seen() == []


def test_a_template_error_retried_renders_attempt_2(queue: Queue, server: EchoServer) -> None:
    url = f"{server.url}/echo?a={{{{ input.nope if attempt == 1 else attempt }}}}"
    run = one_step(queue, url, retry=TWICE).start({})
    drain(queue)
    attempts = run.steps()[0].attempts
    assert [(a.outcome, a.reason) for a in attempts] == [
        (Outcome.FAILED, "template_error"),
        (Outcome.SUCCEEDED, None),
    ]
    assert [r.path for r in server.seen()] == ["/echo?a=2"]


def test_a_secret_that_is_not_set_is_a_template_error(
    queue: Queue, server: EchoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("QUEUE_CORE_SECRET_NOPE", raising=False)
    run = one_step(queue, f"{server.url}/echo", headers={"A": "{{ secrets.NOPE }}"}).start()
    drain(queue)
    attempt = run.steps()[0].attempts[0]
    assert attempt.reason == "template_error"
    assert "QUEUE_CORE_SECRET_NOPE" in (attempt.message or "")


def test_templates_reach_data_only(queue: Queue, server: EchoServer) -> None:
    for url in (
        "/echo?x={{ input.__class__ }}",
        "/echo?x={{ input.keys() }}",
        "/echo?x={{ range(3) }}",
        "/echo?x={{ 'a' * 100000000 }}",
    ):
        one_step(queue, server.url + url).start({"a": 1})
    drain(queue)
    reasons = [e.id for e in queue.executions()]
    for execution_id in reasons:
        attempt = queue.execution(execution_id).steps()[0].attempts[0]
        assert attempt.reason == "template_error", attempt.message
    assert server.seen() == []


# --------------------------------------------------------------------------- secrets


def _stored_text(queue: Queue, run: Any) -> str:
    """Everything the storage holds of ``run``: its steps' attempts, jobs (results,
    payloads) and dead letters, as text."""
    storage = queue.storage()
    parts: list[str] = []
    for step in run.steps():
        parts.append(repr(step.to_dict()))
        if step.job_id:
            job = storage.get_job(step.job_id)
            parts.append(repr(job))
            if job is not None and job.result is not None:
                parts.append(job.result.decode("utf-8", "replace"))
    for entry in queue.dead_letters(limit=1000):
        parts.append(repr(entry))
    return "\n".join(parts)


def test_a_secret_reaches_the_server_and_appears_in_no_record_or_log(
    queue: Queue,
    server: EchoServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("QUEUE_CORE_SECRET_TOKEN", SECRET)
    (tmp_path / "leak.py").write_text(
        "import os, sys\n"
        "print('stdout has', sys.argv[1], os.environ['TOKEN'])\n"
        "print('stderr has', os.environ['TOKEN'], file=sys.stderr)\n"
        "sys.exit(int(sys.argv[2]))\n"
    )
    flow = queue.flow("secretive", retry=ONCE)
    flow.http(
        "echo",
        f"{server.url}/echo?t={{{{ secrets.TOKEN }}}}",
        method="POST",
        headers={"Authorization": "Bearer {{ secrets.TOKEN }}"},
        body={"token": "{{ secrets.TOKEN }}"},
    )
    flow.http("fail", f"{server.url}/status/500?t={{{{ secrets.TOKEN }}}}")
    run = flow.start()
    files = queue.load_flow(_leaky_file(tmp_path)).start()
    caplog.set_level(logging.DEBUG)
    drain(queue, flow_dirs=[tmp_path])
    # the server got the secret, rendered, everywhere it was templated
    seen = server.seen()
    assert any(r.headers.get("Authorization") == f"Bearer {SECRET}" for r in seen)
    assert any(json.loads(r.body or b"{}").get("token") == SECRET for r in seen)
    assert all(r.path.endswith(f"t={SECRET}") for r in seen)
    # ... and it is masked wherever it came back
    echo = run.steps()[0]
    assert echo.state is StepState.SUCCEEDED
    result = json.loads(queue.storage().get_job(echo.job_id).result)  # type: ignore[arg-type, union-attr]
    assert result["headers"]["Authorization"] == "Bearer ***"
    assert json.loads(result["body"]) == {"token": "***"}
    failed = run.steps()[1].attempts[0]
    assert failed.reason == "http_status" and "t=***" in (failed.message or "")
    ok, bad = files.steps()
    assert ok.state is StepState.SUCCEEDED and bad.attempts[0].reason == "exit_code"
    assert "stderr has ***" in (bad.attempts[0].message or "")
    leaked = [_stored_text(queue, run), _stored_text(queue, files), caplog.text]
    for text in leaked:
        for form in (SECRET, "tok-3f9a%2FS3cret%2Bvalue", "S3cret%2Bvalue", "S3cret+value"):
            assert form not in text
    assert "***" in leaked[0] and "***" in leaked[1]


def _leaky_file(tmp_path: Path) -> Path:
    path = tmp_path / "leaky.yaml"
    path.write_text(
        "id: leaky\n"
        "tasks:\n"
        "  - id: prints\n"
        "    type: script\n"
        "    file: leak.py\n"
        "    args: ['{{ secrets.TOKEN }}', '0']\n"
        "    env: { TOKEN: '{{ secrets.TOKEN }}' }\n"
        "  - id: exits\n"
        "    type: script\n"
        "    file: leak.py\n"
        "    args: ['x', '1']\n"
        "    env: { TOKEN: '{{ secrets.TOKEN }}' }\n"
    )
    return path


# --------------------------------------------------------------------------- hosts


@pytest.mark.parametrize("hosts", [[], ["example.com"], ["*.0.0.1"], ["localhost"]])
def test_a_host_not_allowed_is_refused_without_a_request(
    queue: Queue, server: EchoServer, hosts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("QUEUE_CORE_WORKER_HTTP_HOSTS", raising=False)
    run = one_step(queue, f"{server.url}/echo", retry=TWICE).start()
    drain(queue, http_hosts=hosts)
    step = run.steps()[0]
    assert [(a.outcome, a.reason) for a in step.attempts] == [(Outcome.FAILED, "not_allowed")]
    assert "--http-host" in (step.attempts[0].message or "")
    assert step.state is StepState.DEAD and step.reason == "fatal"  # not retried
    assert server.seen() == []


@pytest.mark.parametrize("hosts", [None, ["127.0.0.1"], ["*"], "127.0.0.1,example.com"])
def test_an_allowed_host_is_reached(
    queue: Queue, server: EchoServer, hosts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("QUEUE_CORE_WORKER_HTTP_HOSTS", raising=False)
    run = one_step(queue, f"{server.url}/echo").start()
    if isinstance(hosts, str):  # the environment variable
        monkeypatch.setenv("QUEUE_CORE_WORKER_HTTP_HOSTS", hosts)
        drain(queue, http_hosts=None)
    else:
        drain(queue, http_hosts=hosts)
    assert run.status() is ExecutionState.SUCCEEDED and len(server.seen()) == 1


def test_only_http_urls_are_requested(queue: Queue) -> None:
    run = one_step(queue, "file:///etc/passwd").start()
    drain(queue, http_hosts=["*"])
    attempt = run.steps()[0].attempts[0]
    assert attempt.reason == "not_allowed" and "file://" in (attempt.message or "")


def test_a_refused_connection_fails_the_attempt_and_is_retried(queue: Queue) -> None:
    port = free_port()  # nothing listens there
    run = one_step(queue, f"http://127.0.0.1:{port}/", retry=TWICE).start()
    drain(queue)
    step = run.steps()[0]
    assert [(a.outcome, a.reason) for a in step.attempts] == [(Outcome.FAILED, "error")] * 2
    assert step.attempts[0].error_class == "HttpRequestFailed"


# --------------------------------------------------------------------------- code and file


def test_the_same_flow_in_code_and_in_a_file(
    queue: Queue, server: EchoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUE_CORE_SECRET_TOKEN", SECRET)
    (tmp_path / "flow.yaml").write_text(
        "id: orders-file\n"
        "retry: { max_attempts: 2, initial: 10ms }\n"
        "tasks:\n"
        "  - id: fetch\n"
        "    type: http\n"
        f"    url: '{server.url}/flaky?attempt={{{{ attempt }}}}&day={{{{ input.day }}}}'\n"
        "    headers: { Authorization: 'Bearer {{ secrets.TOKEN }}' }\n"
        "    timeout: 10s\n"
        "  - id: store\n"
        "    type: http\n"
        "    method: POST\n"
        f"    url: '{server.url}/echo'\n"
        "    body: { fetched: '{{ results.fetch.path }}', run: '{{ execution_id }}' }\n"
        "    expect: [200, 201]\n"
        "    depends_on: [fetch]\n"
    )
    code = queue.flow("orders-code", retry=RetryPolicy(max_attempts=2, initial=0.01, jitter=0))
    code.http(
        "fetch",
        f"{server.url}/flaky?attempt={{{{ attempt }}}}&day={{{{ input.day }}}}",
        headers={"Authorization": "Bearer {{ secrets.TOKEN }}"},
        timeout="10s",
    )
    code.http(
        "store",
        f"{server.url}/echo",
        method="POST",
        expect=[200, 201],
        body={"fetched": "{{ results.fetch.path }}", "run": "{{ execution_id }}"},
        depends_on=["fetch"],
    )
    runs = [f.start({"day": "d1"}) for f in (code, queue.load_flow(tmp_path / "flow.yaml"))]
    drain(queue)
    for run in runs:
        out = run.result(timeout=1)
        assert out["fetch"]["headers"]["Authorization"] == "Bearer ***"
        assert json.loads(out["store"]["body"]) == {
            "fetched": "/flaky?attempt=2&day=d1",
            "run": run.id,
        }
        assert [a.reason for a in run.steps()[0].attempts] == ["http_status", None]
    stored = [queue.storage().get_execution(r.id) for r in runs]  # type: ignore[attr-defined]
    by_step = {s.id: s for s in stored[0].spec().steps}
    from_file = {s.id: s for s in stored[1].spec().steps}
    for step_id in ("fetch", "store"):
        a, b = by_step[step_id].to_dict(), from_file[step_id].to_dict()
        for key in ("kind", "url", "method", "headers", "body", "expect", "depends_on"):
            assert a.get(key) == b.get(key), key


def test_declaring_an_http_step_refuses_bad_fields(queue: Queue) -> None:
    from queue_core import ConfigError

    flow = queue.flow("bad-http")
    bad: list[tuple[dict[str, Any], str]] = [
        ({"url": "http://x/{{ input.a"}, "step 'a'.url"),
        ({"url": "http://x/", "method": "FETCH"}, "step 'a'.method"),
        ({"url": "http://x/", "expect": [700]}, "step 'a'.expect[0]"),
        ({"url": "http://x/", "headers": {"A": 1}}, "step 'a'.headers.A"),
        ({"url": "http://x/", "body": {"a": {1, 2}}}, "step 'a'.body"),
        ({"url": "http://x/", "body": ["{% for %}"]}, "step 'a'.body[0]"),
        ({"url": "http://x/", "depends_on": ["ghost"]}, "steps[0].depends_on[0]"),
    ]
    for fields, where in bad:
        with pytest.raises(ConfigError) as info:
            flow.http("a", **fields)
        assert (info.value.code, info.value.field) == ("invalid_flow", where), fields
    with pytest.raises(ConfigError) as option:
        flow.http("a", "http://x/", isolation="process")  # type: ignore[call-arg]
    assert option.value.field == "isolation"
    assert flow.http("a", "http://x/") == "a"
    with pytest.raises(ConfigError):
        flow.http("a", "http://x/")  # a duplicate id
    assert queue.storage().get_job("nothing") is None and JobState  # nothing was stored


def test_an_execution_failed_by_an_http_step_names_it(queue: Queue, server: EchoServer) -> None:
    run = one_step(queue, f"{server.url}/status/503").start()
    drain(queue)
    with pytest.raises(ExecutionFailed) as failed:
        run.result(timeout=1)
    assert failed.value.step_id == "call"
