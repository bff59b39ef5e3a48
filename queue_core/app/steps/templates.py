"""Templates in the fields of flow-file steps, rendered at each attempt in a sandbox, and
the secrets they may use (SPEC §7 "Flow files, the rest of the Sluice format").

The string fields of a step (``url``, ``headers``, ``body``, ``args``, ``env``) may use::

    {{ input.x }}            the execution's input (``input.a.b``, ``input.items[0]``)
    {{ results.step_id }}    the result of a dependency (``results["fetch-users"]``)
    {{ attempt }}            this attempt's number, 1-based
    {{ execution_id }}       the execution's id
    {{ secrets.NAME }}       the worker's environment variable QUEUE_CORE_SECRET_NAME

They are rendered by Jinja2's :class:`~jinja2.sandbox.SandboxedEnvironment`, made
stricter still: names and keys reach data only (mappings by key, lists by index; no
attribute or method of any object), nothing can be called, there are no globals
(``range``, ``dict``, …), ``*`` and ``**`` are bounded, and a rendered field is at most
:data:`MAX_RENDERED` characters. Filters work (``{{ input.name | upper }}``,
``{{ results.rows | tojson }}``). An undefined name or key is an error
(``StrictUndefined``). A value that is not a string renders as JSON (a mapping or a list
``{"a": 1}``, ``true``, ``null``); numbers render as themselves.

A field that cannot be rendered raises :class:`TemplateError` (attempt reason
``template_error``, retried by the flow's policy like any failure). Secrets are read
from the environment at each attempt, are never stored, and :class:`Masker` replaces
them with ``***`` in whatever the step records (messages, results).

Jinja2 (the ``flows`` extra) is imported on first use.
"""

from __future__ import annotations

import functools
import json
import os
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any, Final

from queue_core.app.steps.failures import StepFailed
from queue_core.app.steps.names import SECRET_ENV_PREFIX
from queue_core.records.errors import ConfigError

__all__ = [
    "MASK",
    "MAX_RENDERED",
    "Masker",
    "TemplateContext",
    "TemplateError",
    "check_template",
    "has_template",
    "render",
    "secrets_from_env",
]

MASK: Final = "***"
"""What a secret's value is replaced with wherever a step's output is shown or stored."""
MAX_RENDERED: Final = 1024 * 1024
"""Characters one rendered field may have."""
_MAX_POWER: Final = 64
_MARKERS: Final = ("{{", "{%", "{#")


class TemplateError(StepFailed):
    """A step's field could not be rendered (attempt reason ``template_error``)."""

    reason = "template_error"


def has_template(text: str) -> bool:
    """Whether ``text`` holds template syntax (else it is used as it is)."""
    return any(m in text for m in _MARKERS)


def secrets_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The secrets of this attempt: ``{NAME: value}`` of every ``QUEUE_CORE_SECRET_NAME``
    variable of the (worker's) environment."""
    env = os.environ if environ is None else environ
    cut = len(SECRET_ENV_PREFIX)
    return {k[cut:]: v for k, v in env.items() if k.startswith(SECRET_ENV_PREFIX) and k[cut:]}


class _Secrets(dict[str, str]):
    """The ``secrets`` of a template: a missing name says which variable to set."""


class TemplateContext:
    """What the templates of one attempt may read."""

    __slots__ = ("values",)

    def __init__(
        self,
        *,
        input: Any,
        results: Mapping[str, Any],
        attempt: int,
        execution_id: str,
        secrets: Mapping[str, str],
    ) -> None:
        self.values: dict[str, Any] = {
            "input": input,
            "results": dict(results),
            "attempt": attempt,
            "execution_id": execution_id,
            "secrets": _Secrets(secrets),
        }


# --------------------------------------------------------------------------- the sandbox


def _finalize(value: Any) -> Any:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except ValueError:  # a cycle cannot come from data; be safe anyway
        return str(value)


_MISSING: Final[Any] = object()


def _data(obj: Any, key: Any) -> Any:
    """``obj[key]`` when ``obj`` is data (a mapping by string key, a list or a string by
    index or slice), else :data:`_MISSING`."""
    if isinstance(obj, Mapping):
        return obj[key] if isinstance(key, str) and key in obj else _MISSING
    if isinstance(obj, (list, tuple, str)) and isinstance(key, (int, slice)):
        if isinstance(key, bool):
            return _MISSING
        try:
            return obj[key]
        except IndexError:
            return _MISSING
    return _MISSING


def _bounded_binop(operator: str, left: Any, right: Any) -> Any:
    """``left ** right`` or ``left * right``, refused (``SecurityError``) when huge."""
    from jinja2.exceptions import SecurityError

    if operator == "**":
        if isinstance(right, (int, float)) and abs(right) > _MAX_POWER:
            raise SecurityError(f"exponent {right} is larger than {_MAX_POWER}")
        return left**right
    for seq, times in ((left, right), (right, left)):
        if isinstance(seq, (str, list, tuple)) and isinstance(times, int):
            if len(seq) * times > MAX_RENDERED:
                raise SecurityError(f"a repeated value of {len(seq) * times} items is too large")
    return left * right


@functools.cache
def _environment() -> Any:
    from jinja2 import StrictUndefined
    from jinja2.exceptions import SecurityError
    from jinja2.runtime import LoopContext
    from jinja2.sandbox import SandboxedEnvironment

    class DataOnly(SandboxedEnvironment):
        """Names and keys reach data only; nothing is called; ``*``/``**`` are bounded."""

        intercepted_binops = frozenset({"*", "**"})

        def _lookup(self, obj: Any, key: Any) -> Any:
            found = _data(obj, key)
            if found is not _MISSING:
                return found
            if isinstance(obj, _Secrets):
                return self.undefined(
                    f"secret {key!r} is not set: the worker's environment has no "
                    f"{SECRET_ENV_PREFIX}{key}"
                )
            return self.undefined(obj=obj, name=key)

        def getattr(self, obj: Any, attribute: str) -> Any:
            if isinstance(obj, LoopContext):  # loop.index, loop.first, ... of a for loop
                return super().getattr(obj, attribute)
            return self._lookup(obj, attribute)

        def getitem(self, obj: Any, argument: Any) -> Any:
            return self._lookup(obj, argument)

        def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
            return isinstance(obj, LoopContext)  # the |attr filter reaches nothing else

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            raise SecurityError("templates call nothing: use data and filters only")

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            return _bounded_binop(operator, left, right)

    env = DataOnly(
        undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True, finalize=_finalize
    )
    env.globals.clear()
    return env


@functools.lru_cache(maxsize=512)
def _compiled(source: str) -> Any:
    return _environment().from_string(source)


def _imports() -> None:
    try:
        import jinja2  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"templates in flow steps need Jinja2 ({exc.name} is missing) — install the "
            "extra: pip install 'queue-core[flows]'",
            code="missing_driver",
            value=exc.name,
        ) from None


def check_template(text: str) -> str | None:
    """The syntax error of ``text`` as a template, or ``None`` (loading a flow file).

    Raises:
        ConfigError: ``missing_driver`` when Jinja2 is not installed.
    """
    if not has_template(text):
        return None
    _imports()
    from jinja2 import TemplateSyntaxError

    try:
        _environment().parse(text)
    except TemplateSyntaxError as exc:
        return f"template syntax error at line {exc.lineno}: {exc.message}"
    return None


def _render_text(text: str, context: TemplateContext, where: str) -> str:
    if not has_template(text):
        return text
    _imports()
    from jinja2 import TemplateError as JinjaError

    try:
        out: str = _compiled(text).render(context.values)
    except JinjaError as exc:
        raise TemplateError(f"{where}: cannot render {text!r}: {exc}") from None
    except (ArithmeticError, TypeError, ValueError) as exc:  # e.g. {{ 1 / 0 }}, {{ "a" - 1 }}
        raise TemplateError(
            f"{where}: cannot render {text!r}: {type(exc).__name__}: {exc}"
        ) from None
    if len(out) > MAX_RENDERED:
        raise TemplateError(f"{where}: renders to {len(out)} characters (at most {MAX_RENDERED})")
    return out


def render(value: Any, context: TemplateContext, where: str) -> Any:
    """``value`` with every string in it rendered (mappings and lists recursively; keys
    are not templates). ``where`` names the field in a :class:`TemplateError`
    (``tasks.fetch.url``)."""
    if isinstance(value, str):
        return _render_text(value, context, where)
    if isinstance(value, Mapping):
        return {k: render(v, context, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [render(v, context, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


# --------------------------------------------------------------------------- masking


class Masker:
    """Replaces secret values with :data:`MASK` in text and in JSON-like data.

    Each value is masked as it is and in its URL-encoded and JSON-escaped forms (a
    secret in a query string, or echoed in a JSON body). Empty values mask nothing.
    """

    __slots__ = ("_needles",)

    def __init__(self, values: Iterable[str]) -> None:
        forms: set[str] = set()
        for value in values:
            if not value:
                continue
            forms.add(value)
            forms.add(urllib.parse.quote(value, safe=""))
            forms.add(urllib.parse.quote_plus(value, safe=""))
            forms.add(json.dumps(value, ensure_ascii=False)[1:-1])
            forms.add(json.dumps(value)[1:-1])
        forms.discard("")
        self._needles = sorted(forms, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._needles)

    def text(self, text: str) -> str:
        """``text`` with every secret replaced."""
        for needle in self._needles:
            if needle in text:
                text = text.replace(needle, MASK)
        return text

    def found_in(self, text: str) -> bool:
        """Whether ``text`` holds a secret."""
        return any(needle in text for needle in self._needles)

    def data(self, value: Any) -> Any:
        """A copy of JSON-like ``value`` with every string (and mapping key) masked."""
        if not self._needles:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                (self.text(k) if isinstance(k, str) else k): self.data(v) for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value
