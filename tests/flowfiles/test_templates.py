"""queue_core.app.steps.templates: rendering step fields in the sandbox, and masking secrets."""

from __future__ import annotations

from typing import Any

import pytest

from queue_core.app.steps.templates import (
    MAX_RENDERED,
    Masker,
    TemplateContext,
    TemplateError,
    check_template,
    render,
    secrets_from_env,
)

CTX = TemplateContext(
    input={
        "day": "2026-11-30",
        "items": [10, 20],
        "flag": True,
        "none": None,
        "nested": {"a": {"b": "deep"}},
        "keys": "a key named keys",
    },
    results={"fetch-users": {"count": 2, "names": ["ada", "bob"]}, "plain": "text"},
    attempt=2,
    execution_id="ex-1",
    secrets={"TOKEN": "s3cr3t"},
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no template at all {", "no template at all {"),
        ("{{ input.day }}", "2026-11-30"),
        ("{{ input['day'] }}/{{ input.items[1] }}/{{ input.items.0 }}", "2026-11-30/20/10"),
        ("{{ input.nested.a.b }}", "deep"),
        ("{{ input.keys }}", "a key named keys"),  # data first: no dict method shadows a key
        ("{{ results['fetch-users'].count }}", "2"),
        ("{{ results.plain }}", "text"),
        ("{{ results['fetch-users'] }}", '{"count":2,"names":["ada","bob"]}'),
        ("{{ input.flag }} {{ input.none }}", "true null"),
        ("{{ attempt }}:{{ execution_id }}", "2:ex-1"),
        ("Bearer {{ secrets.TOKEN }}", "Bearer s3cr3t"),
        ("{{ input.day | replace('-', '') }}", "20261130"),
        ("{{ results['fetch-users'].names | join(',') | upper }}", "ADA,BOB"),
        ("{{ input.items | tojson }}", "[10, 20]"),
        ("{{ input.missing | default('x') }}", "x"),
        ("{% for n in input.items %}{{ loop.index }}={{ n }};{% endfor %}", "1=10;2=20;"),
        ("{{ attempt * 10 }} {{ 2 ** 10 }}", "20 1024"),
        ("line\n", "line\n"),
    ],
)
def test_rendering(text: str, expected: str) -> None:
    assert render(text, CTX, "f") == expected


def test_mappings_and_lists_are_rendered_string_by_string() -> None:
    body = {"day": "{{ input.day }}", "n": 3, "list": ["{{ attempt }}", None, False]}
    assert render(body, CTX, "body") == {"day": "2026-11-30", "n": 3, "list": ["2", None, False]}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{{ input.missing }}", "has no attribute 'missing'"),
        ("{{ results.other }}", "has no attribute 'other'"),
        ("{{ secrets.NOPE }}", "secret 'NOPE' is not set"),
        ("{{ nothing }}", "'nothing' is undefined"),
        ("{{ input.__class__ }}", "has no attribute '__class__'"),
        ("{{ input.items.__len__ }}", "has no attribute '__len__'"),
        ("{{ input.day.upper() }}", "templates call nothing"),
        ("{{ input | attr('values') }}", "has no attribute 'values'"),
        ("{{ input.day | attr('upper') }}", "has no attribute 'upper'"),
        ("{% include 'other.html' %}", "no loader for this environment specified"),
        ("{{ range(10) }}", "templates call nothing"),
        ("{{ cycler }}", "'cycler' is undefined"),
        ("{{ 'x' * 100000000 }}", "too large"),
        ("{{ 2 ** 100000 }}", "larger than 64"),
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{{ input.items[5] }}", "has no element 5"),
        ("{{ input.day", "unexpected end of template"),
    ],
)
def test_what_cannot_be_rendered_is_a_template_error(text: str, words: str) -> None:
    with pytest.raises(TemplateError) as info:
        render({"k": [text]}, CTX, "tasks.a.body")
    assert info.value.reason == "template_error"
    assert str(info.value).startswith("tasks.a.body.k[0]: cannot render")
    assert words in str(info.value)


def test_a_rendered_field_is_bounded() -> None:
    many = TemplateContext(
        input={"big": "y" * (MAX_RENDERED // 2 + 1)},
        results={},
        attempt=1,
        execution_id="e",
        secrets={},
    )
    assert len(render("{{ input.big }}", many, "f")) == MAX_RENDERED // 2 + 1
    with pytest.raises(TemplateError, match="renders to"):
        render("{{ input.big }}{{ input.big }}", many, "f")


def test_syntax_is_checked_without_rendering() -> None:
    assert check_template("{{ secrets.NOT_SET_ANYWHERE }}") is None
    assert check_template("plain") is None
    problem = check_template("a\n{% if x %}")
    assert problem is not None and problem.startswith("template syntax error at line 2")


def test_secrets_come_from_the_prefixed_environment() -> None:
    env = {
        "QUEUE_CORE_SECRET_TOKEN": "t",
        "QUEUE_CORE_SECRET_": "no name",
        "QUEUE_CORE_SECRETS": "x",
        "TOKEN": "y",
        "QUEUE_CORE_SECRET_db_pass": "p",
    }
    assert secrets_from_env(env) == {"TOKEN": "t", "db_pass": "p"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Bearer a/b+c=d", "Bearer ***"),
        ("?t=a%2Fb%2Bc%3Dd&x=1", "?t=***&x=1"),
        ('{"t": "a/b+c=d"}', '{"t": "***"}'),
        ("nothing here", "nothing here"),
    ],
)
def test_masking_text(value: str, expected: str) -> None:
    assert Masker(["a/b+c=d", ""]).text(value) == expected


def test_masking_data_and_quotes() -> None:
    masker = Masker(['q"t'])
    data: Any = {'key q"t': ['q"t', 3, {"x": 'a q\\"t'}], "n": None}
    assert masker.data(data) == {"key ***": ["***", 3, {"x": "a ***"}], "n": None}
    assert not Masker([]) and Masker([]).data(data) is data
