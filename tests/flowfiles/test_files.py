"""queue_core.app.steps.files: YAML flow files (SPEC §7 "Flow files")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from queue_core.app.steps.files import DEFAULT_TASK_TIMEOUT_MS, load_flow_file
from queue_core.records.errors import ConfigError
from queue_core.rules.flows.spec import ConcurrencySpec, FlowSpec

SPEC_EXAMPLE = (Path(__file__).parents[1] / "data" / "sync-orders.yaml").read_text()
"""The YAML example of SPEC §7, as written (shared with tests/contrib/test_cli_flow.py)."""


@pytest.fixture
def flow_dir(tmp_path: Path) -> Path:
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "extract.py").write_text("print('[1, 2]')\n")
    (tmp_path / "pipelines" / "load.py").write_text("print(3)\n")
    sh = tmp_path / "run.sh"
    sh.write_text("#!/bin/sh\necho hi\n")
    sh.chmod(0o755)
    (tmp_path / "plain.sh").write_text("#!/bin/sh\necho hi\n")
    return tmp_path


def write(directory: Path, text: str, name: str = "flow.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def test_the_spec_example(flow_dir: Path) -> None:
    spec = load_flow_file(write(flow_dir, SPEC_EXAMPLE))
    assert spec.name == "sync-orders"
    assert spec.concurrency == ConcurrencySpec(1, "queue")
    assert spec.max_parallel == 4
    assert spec.timeout_ms == 2 * 3600 * 1000
    assert spec.source == str(flow_dir / "flow.yaml")
    assert dict(spec.retry) == {
        "max_attempts": 3, "backoff": "exponential", "initial": 30.0, "max_delay": 600.0,
        "coefficient": 2.0, "jitter": 0.0,
    }
    extract, load = spec.steps
    assert (extract.id, extract.kind, extract.file) == (
        "extract", "script", str(flow_dir / "pipelines" / "extract.py")
    )
    assert extract.timeout_ms == 30 * 60 * 1000 and extract.retry == {}
    assert extract.kill_grace_ms == 10_000
    assert (load.depends_on, load.timeout_ms, dict(load.retry)) == (
        ("extract",), DEFAULT_TASK_TIMEOUT_MS, {"max_attempts": 1}
    )
    # extract retries 3 times, 30 s then 60 s, no jitter; load never retries
    policy = spec.step_policy("extract")
    assert (policy.max_attempts, policy.base_delay(1), policy.base_delay(2)) == (3, 30.0, 60.0)
    assert policy.delay(2, lambda: 0.99) == 60.0
    assert spec.step_policy("load").max_attempts == 1
    # the stored form carries everything: any worker can run it without the file
    assert FlowSpec.from_json(spec.to_json()) == spec


def test_defaults_where_the_file_is_silent(flow_dir: Path) -> None:
    spec = load_flow_file(write(flow_dir, """\
        id: tiny
        concurrency: { limit: 2 }
        tasks:
          - { id: a, type: task, task: app.tasks.a }
    """))
    assert spec.concurrency == ConcurrencySpec(2, "queue")
    assert (spec.max_parallel, spec.timeout_ms) == (0, None)
    (a,) = spec.steps
    assert (a.kind, a.task, a.timeout_ms) == ("task", "app.tasks.a", DEFAULT_TASK_TIMEOUT_MS)
    policy = spec.step_policy("a")
    assert (policy.max_attempts, policy.backoff, policy.initial, policy.max_delay,
            policy.jitter) == (1, "fixed", 10.0, 600.0, 0.0)


def test_namespace_defaults_come_first_in_the_merge(flow_dir: Path) -> None:
    write(flow_dir, """\
        defaults:
          retry: { max_attempts: 5, initial: 1m, max: 20m }
          timeout: 1h
    """, name="namespace.yaml")
    spec = load_flow_file(write(flow_dir, """\
        id: merged
        retry: { backoff: exponential, initial: 2m }
        tasks:
          - { id: a, type: script, file: run.sh }
          - { id: b, type: script, file: run.sh, timeout: 5m, retry: { max_attempts: 2 } }
    """))
    assert dict(spec.retry) == {
        "max_attempts": 5, "backoff": "exponential", "initial": 120.0, "max_delay": 1200.0,
        "coefficient": 2.0, "jitter": 0.0,
    }
    a, b = spec.steps
    assert (a.timeout_ms, b.timeout_ms) == (3_600_000, 300_000)
    assert spec.step_policy("a").max_attempts == 5
    assert (spec.step_policy("b").max_attempts, spec.step_policy("b").initial) == (2, 120.0)


def test_a_timeout_under_a_millisecond_is_one_millisecond_not_none(flow_dir: Path) -> None:
    """A positive duration never becomes 0 ms, which a stored step reads as "no limit"."""
    spec = load_flow_file(write(flow_dir, """\
        id: tiny
        timeout: 1us
        tasks:
          - { id: a, type: script, file: run.sh, timeout: 400us }
    """))
    assert (spec.timeout_ms, spec.steps[0].timeout_ms) == (1, 1)


def test_script_ids_need_not_be_identifiers(flow_dir: Path) -> None:
    spec = load_flow_file(write(flow_dir, """\
        id: dashed
        tasks:
          - { id: extract-orders, type: script, file: run.sh }
          - { id: load-orders, type: script, file: run.sh, depends_on: [extract-orders] }
    """))
    assert spec.order() == ["extract-orders", "load-orders"]


TWO = """\
id: f
tasks:
  - { id: a, type: script, file: run.sh }
  - { id: b, type: script, file: run.sh, depends_on: [a] }
"""


@pytest.mark.parametrize(
    ("text", "code", "field", "words"),
    [
        ("id: f\ntasks:\n  - { id: a, type: script, file: run.sh, depends_on: [b] }\n"
         "  - { id: b, type: script, file: run.sh, depends_on: [a] }\n",
         "invalid_flow", "tasks[0].depends_on[0]", "dependency cycle: a -> b -> a"),
        (TWO.replace("id: b", "id: on", 1), "invalid_flow", "tasks[1].id",
         "invalid value True — input should be a valid string; YAML read the unquoted "
         "value as bool: quote it"),
        (TWO + "color: red\n", "invalid_flow", "color",
         "color: unknown key — expected one of id, concurrency, max_parallel, timeout"),
        (TWO.replace("file: run.sh }", "file: run.sh, retires: 3 }", 1),
         "invalid_flow", "tasks[0].retires", "tasks[0].retires: unknown key"),
        (TWO.replace("file: run.sh }", "file: run.sh, timeout: soon }", 1),
         "invalid_duration", "tasks[0].timeout", "invalid duration 'soon'"),
        (TWO + "timeout: 0s\n", "invalid_duration", "timeout", "invalid duration '0s'"),
        (TWO + "timeout: -5m\n", "invalid_duration", "timeout", "'-5m'"),
        (TWO + "retry: { initial: 10 parsecs }\n", "invalid_duration", "retry.initial",
         "'10 parsecs'"),
        (TWO + "retry: { max_attempts: 21 }\n", "invalid_flow", "retry.max_attempts",
         "invalid value 21"),
        (TWO + "retry: { max_attempts: 0 }\n", "invalid_flow", "retry.max_attempts", "0"),
        (TWO + "retry: { max_attempts: '3' }\n", "invalid_flow", "retry.max_attempts", "'3'"),
        (TWO + "retry: { backoff: linear }\n", "invalid_flow", "retry.backoff", "'linear'"),
        (TWO + "concurrency: { limit: 1, behavior: drop }\n", "invalid_flow",
         "concurrency.behavior", "'drop'"),
        (TWO + "concurrency: { behavior: skip }\n", "invalid_flow", "concurrency.limit",
         "required key is missing"),
        (TWO + "max_parallel: true\n", "invalid_flow", "max_parallel", "True"),
        (TWO + "max_parallel: -1\n", "invalid_flow", "max_parallel", "-1"),
        ("id: f\ntasks:\n  - { id: a, type: script, file: run.sh }\n"
         "  - { id: b, type: script, file: run.sh }\n  - { id: a, type: script, file: run.sh }\n",
         "invalid_flow", "tasks[2].id", "duplicate step id 'a' (first used by tasks[0])"),
        (TWO.replace("depends_on: [a]", "depends_on: [zz]"), "invalid_flow",
         "tasks[1].depends_on[0]", "unknown step id 'zz'"),
        (TWO.replace("depends_on: [a]", "depends_on: [a, 7]"), "invalid_flow",
         "tasks[1].depends_on[1]", "invalid value 7"),
        ("id: f\n", "invalid_flow", "tasks", "tasks: required key is missing"),
        ("id: f\ntasks: []\n", "invalid_flow", "tasks", "tasks"),
        ("tasks:\n  - { id: a, type: script, file: run.sh }\n", "invalid_flow", "id",
         "id: required key is missing"),
        (TWO.replace("type: script, file: run.sh }", "type: docker }", 1), "invalid_flow",
         "tasks[0].type", "'docker'"),
        (TWO.replace("type: script, file: run.sh }", "type: http }", 1), "invalid_flow",
         "tasks[0].url", "required for type: http"),
        (TWO.replace("file: run.sh }", "}", 1), "invalid_flow", "tasks[0].file",
         "required for type: script"),
        (TWO.replace("file: run.sh }", "file: nowhere.py }", 1), "invalid_flow",
         "tasks[0].file", "no such file 'nowhere.py'"),
        (TWO.replace("file: run.sh }", "file: plain.sh }", 1), "invalid_flow",
         "tasks[0].file", "'plain.sh' is not executable"),
        (TWO.replace("file: run.sh }", "file: run.sh, task: x }", 1), "invalid_flow",
         "tasks[0].task", "a script task names a file"),
        ("id: f\ntasks:\n  - { id: a, type: task }\n", "invalid_flow", "tasks[0].task",
         "required for type: task"),
        ("id: f\ntasks:\n  - { id: input, type: task, task: t.a }\n"
         "  - { id: b, type: task, task: t.b, depends_on: [input] }\n", "invalid_flow",
         "tasks[1].depends_on[0]", "'input' is the parameter of the execution input"),
    ],
)
def test_bad_files_are_refused_naming_the_path(
    flow_dir: Path, text: str, code: str, field: str, words: str
) -> None:
    path = write(flow_dir, text)
    with pytest.raises(ConfigError) as info:
        load_flow_file(path)
    assert (info.value.code, info.value.field) == (code, field), str(info.value)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert field in message
    assert words in message


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("id: f\nid: g\ntasks: []\n", "duplicate key 'id' at line 2"),
        ("- id: f\n", "expected a mapping"),
        ("id: [unclosed\n", "not valid YAML"),
        ("", "expected a mapping"),
    ],
)
def test_files_that_are_not_a_flow_mapping(flow_dir: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError, match="invalid|expected|duplicate") as info:
        load_flow_file(write(flow_dir, text))
    assert info.value.code == "invalid_flow"
    assert words in str(info.value)


def test_several_problems_are_all_named(flow_dir: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_flow_file(write(flow_dir, TWO + "color: red\nretry: { max_attempts: 99 }\n"))
    assert "retry.max_attempts" in str(info.value) and "color: unknown key" in str(info.value)


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the flow file") as info:
        load_flow_file(tmp_path / "absent.yaml")
    assert info.value.code == "invalid_flow"


@pytest.mark.parametrize(
    ("namespace", "code", "field"),
    [
        ("defaults:\n  retry: { max_attempts: 30 }\n", "invalid_flow",
         "defaults.retry.max_attempts"),
        ("defaults:\n  timeout: forever\n", "invalid_duration", "defaults.timeout"),
        ("defualts: {}\n", "invalid_flow", "defualts"),
    ],
)
def test_a_bad_namespace_file_is_refused(
    flow_dir: Path, namespace: str, code: str, field: str
) -> None:
    ns = write(flow_dir, namespace, name="namespace.yaml")
    with pytest.raises(ConfigError) as info:
        load_flow_file(write(flow_dir, TWO))
    assert (info.value.code, info.value.field) == (code, field)
    assert str(info.value).startswith(f"{ns}: {field}")


def test_queue_core_imports_without_yaml_or_pydantic(tmp_path: Path) -> None:
    (tmp_path / "flow.yaml").write_text(TWO)
    code = textwrap.dedent(f"""
        import sys
        sys.modules["yaml"] = None
        sys.modules["pydantic"] = None
        import queue_core, queue_core.flows, queue_core.rules.flows.decide
        import queue_core.app.steps.files
        from queue_core.app.steps.files import load_flow_file
        from queue_core.records.errors import ConfigError
        try:
            load_flow_file({str(tmp_path / "flow.yaml")!r})
        except ConfigError as exc:
            print(exc.code, "queue-core[flows]" in str(exc))
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.split() == ["missing_driver", "True"]


# --------------------------------------------------------------------------- the rest of the format

HTTP_FLOW = """\
id: notify
retry: { max_attempts: 3 }
tasks:
  - id: extract
    type: script
    file: pipelines/extract.py
    args: ['--day={{ input.day }}', plain]
    env: { API_TOKEN: '{{ secrets.TOKEN }}' }
  - id: fetch-users
    type: http
    url: 'https://api.example.com/users?day={{ input.day }}'
    headers: { Authorization: 'Bearer {{ secrets.TOKEN }}' }
    timeout: 30s
    depends_on: [extract]
  - id: post
    type: http
    method: post
    url: https://hooks.example.com/done
    body: { users: '{{ results["fetch-users"] | tojson }}', attempt: '{{ attempt }}', n: 2 }
    expect: [200, 202]
    depends_on: [fetch-users]
  - id: ping
    type: http
    url: https://hooks.example.com/ping
    body: 'run {{ execution_id }}'
    expect: 204
"""


def test_http_steps_templates_args_and_env(flow_dir: Path) -> None:
    spec = load_flow_file(write(flow_dir, HTTP_FLOW))
    extract, fetch, post, ping = spec.steps
    assert extract.kind == "script"
    assert extract.args == ("--day={{ input.day }}", "plain")
    assert extract.env == {"API_TOKEN": "{{ secrets.TOKEN }}"}
    assert (fetch.kind, fetch.method, fetch.timeout_ms) == ("http", None, 30_000)
    assert fetch.url == "https://api.example.com/users?day={{ input.day }}"
    assert fetch.headers == {"Authorization": "Bearer {{ secrets.TOKEN }}"}
    assert (fetch.body, fetch.expect, fetch.task, fetch.file) == (None, (), None, None)
    assert (post.method, post.expect) == ("POST", (200, 202))
    assert post.body == {"users": '{{ results["fetch-users"] | tojson }}',
                         "attempt": "{{ attempt }}", "n": 2}
    assert (ping.body, ping.expect) == ("run {{ execution_id }}", (204,))
    # templates are stored as written: rendered (and secrets read) only at each attempt
    assert FlowSpec.from_json(spec.to_json()) == spec
    assert "secrets.TOKEN" in spec.to_json()


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (("body: 'run {{ execution_id }}'", "body: 'run {{ execution_id'"), "tasks[3].body",
         "template syntax error"),
        (("Bearer {{ secrets.TOKEN }}", "Bearer {% if %}"), "tasks[1].headers.Authorization",
         "template syntax error"),
        (("plain]", "'{{ }}']"), "tasks[0].args[1]", "template syntax error"),
        (("method: post", "method: fetch"), "tasks[2].method", "GET, HEAD, POST"),
        (("expect: 204", "expect: 1000"), "tasks[3].expect", "100 to 599"),
        (("expect: 204", "expect: [ok]"), "tasks[3].expect[0]", "100 to 599"),
        (("expect: 204", "expect: true"), "tasks[3].expect", "a status code or a list"),
        (("    timeout: 30s\n", "    file: x.py\n"), "tasks[1].file",
         "a task of type http takes no file"),
        (("    args: ['--day={{ input.day }}', plain]\n", "    url: http://x/\n"),
         "tasks[0].url", "a task of type script takes no url"),
        (("'Bearer {{ secrets.TOKEN }}'", "7"), "tasks[1].headers.Authorization",
         "invalid value 7"),
        (("    url: https://hooks.example.com/ping\n", ""), "tasks[3].url",
         "required for type: http"),
    ],
)
def test_bad_http_and_template_fields_are_refused(
    flow_dir: Path, change: tuple[str, str], field: str, words: str
) -> None:
    assert change[0] in HTTP_FLOW
    path = write(flow_dir, HTTP_FLOW.replace(*change, 1))
    with pytest.raises(ConfigError) as info:
        load_flow_file(path)
    assert (info.value.code, info.value.field) == ("invalid_flow", field), str(info.value)
    assert words in str(info.value)


def _alias_bomb() -> str:
    """A "billion laughs": 9 levels of 10 aliases each expand to 10^9 strings."""
    lines = ["id: bomb", 'x0: &a0 ["lollollollollol", ' + ", ".join(['"lol"'] * 9) + "]"]
    for level in range(1, 9):
        lines.append(f"x{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]")
    lines += ["tasks:", "  - { id: a, type: script, file: run.sh, depends_on: [*a8] }", ""]
    return "\n".join(lines)


ALIAS_BOMB = _alias_bomb()


def test_an_alias_bomb_is_refused_before_it_expands(flow_dir: Path) -> None:
    assert 600 < len(ALIAS_BOMB.encode()) < 800  # the size of the probe's bomb (712 bytes)
    with pytest.raises(ConfigError) as info:
        load_flow_file(write(flow_dir, ALIAS_BOMB))
    assert info.value.code == "invalid_flow"
    assert "YAML anchors are not accepted" in str(info.value) and "line 2" in str(info.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("id: f\nbase: &b { type: script, file: run.sh }\ntasks:\n  - { id: a, <<: *b }\n",
         "anchors are not accepted"),
        ("id: f\ntasks:\n  - { id: a, type: script, file: run.sh, depends_on: *x }\n",
         "aliases are not accepted in flow files: *x at line 3"),
    ],
)
def test_anchors_and_aliases_are_refused(flow_dir: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_flow_file(write(flow_dir, text))
    assert info.value.code == "invalid_flow" and words in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "id: f\ntasks: " + "[" * 5000 + "]" * 5000 + "\n",
        "id: f\ntasks: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
        "id: f\ntasks:\n" + "".join("  " * i + "- \n" for i in range(1, 1500)),
    ],
)
def test_deep_nesting_is_refused_without_a_recursion_error(flow_dir: Path, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_flow_file(write(flow_dir, text))
    assert info.value.code == "invalid_flow"
    assert "deeper than 64 levels" in str(info.value)


def test_nesting_up_to_the_bound_is_accepted(flow_dir: Path) -> None:
    body = "[" * 59 + "1" + "]" * 59  # the file's mappings and lists above it: 5 levels
    spec = load_flow_file(write(flow_dir, (
        "id: f\ntasks:\n  - id: a\n    type: http\n    url: http://x/\n"
        f"    body: {{ deep: {body} }}\n"
    )))
    assert spec.steps[0].body is not None
