"""Settings from a configuration file and the environment.

A project keeps its queue settings in ``queue-core.toml`` in the working directory, or in
``[tool.queue-core]`` of ``pyproject.toml`` there (env ``QUEUE_CORE_CONFIG`` names another
file). Every setting is resolved with one precedence, per value::

    explicit argument  >  environment variable  >  configuration file  >  default

::

    # queue-core.toml (in pyproject.toml the same keys go under [tool.queue-core])
    url = "sqlite:///jobs.db"
    serializer = "json"

    [worker]
    slots = 4
    queues = ["default", "emails"]
    flow_dirs = ["flows"]          # type: script flow steps may run from here
    http_hosts = ["api.example.com"]   # type: http flow steps may reach these

    [task]                 # defaults for every task of a Queue that sets none
    queue = "default"
    max_retries = 3
    timeout = "2m"

The file is validated when it is read: an unknown key or a bad value is a
:class:`~queue_core.records.errors.ConfigError` naming the file, the key and what is accepted.
``queue-core config [--json]`` prints every effective value and where it came from.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from queue_core.records.base import Record
from queue_core.records.durations import parse_duration
from queue_core.records.errors import ConfigError
from queue_core.rules import RetryPolicy, policy_from_options
from queue_core.storage.protocol import Storage
from queue_core.storage.registry import backend_class
from queue_core.storage.urls import check_sqlite_url, mask_url, redact

__all__ = [
    "CONFIG_FILE",
    "ENV_CONFIG",
    "KEYS",
    "Config",
    "Setting",
    "file_retry_policy",
    "load_config",
]

CONFIG_FILE: Final = "queue-core.toml"
PYPROJECT: Final = "pyproject.toml"
ENV_CONFIG: Final = "QUEUE_CORE_CONFIG"


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


UNSET: Final[Any] = _Unset()
"""An explicit argument that was not given."""


# --------------------------------------------------------------------------- value checks


def _fail(where: str, key: str, value: object, expected: str) -> ConfigError:
    return ConfigError(
        f"invalid {key} {value!r} in {where} — expected {expected}",
        code="invalid_option",
        field=key,
        value=value,
    )


def _string(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a non-empty string")
    return value


def _boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
    raise ValueError("true or false (env: 1/0, true/false, yes/no, on/off)")


def _slots(value: object) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError("an integer from 1 to 10000") from None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
        raise ValueError("an integer from 1 to 10000")
    return value


def _prefetch(value: object) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError("an integer from 0 to 10000") from None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10_000:
        raise ValueError("an integer from 0 to 10000")
    return value


def _queues(value: object) -> list[str]:
    if isinstance(value, str):
        value = [q.strip() for q in value.split(",") if q.strip()]
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(q, str) and q.strip() for q in value)
    ):
        raise ValueError("a non-empty list of queue names (env: comma-separated)")
    return [q.strip() for q in value]


def _dirs(value: object) -> list[str]:
    if isinstance(value, str):
        value = [d for d in value.split(os.pathsep) if d.strip()]
    if not isinstance(value, list) or not all(isinstance(d, str) and d.strip() for d in value):
        raise ValueError(f"a list of directories (env: separated by {os.pathsep!r})")
    return list(value)


def _hosts(value: object) -> list[str]:
    if isinstance(value, str):
        value = [h.strip() for h in value.split(",") if h.strip()]
    if not isinstance(value, list) or not all(isinstance(h, str) and h.strip() for h in value):
        raise ValueError("a list of hosts, '*.domain' or '*' (env: comma-separated)")
    return [h.strip() for h in value]


def _duration(value: object) -> float:
    if isinstance(value, str):
        try:
            return parse_duration(float(value) if _is_number(value) else value)
        except ConfigError:
            pass
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return parse_duration(value)
        except ConfigError:
            pass
    raise ValueError("a duration > 0: seconds or a string such as '90s', '5m', '1h30m'")


def _timeout(value: object) -> float | None:
    if value is False or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    try:
        return _duration(value)
    except ValueError:
        raise ValueError(
            "a duration > 0 (seconds or '90s', '5m'), or \"none\" / false for no limit"
        ) from None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _choice(*allowed: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        if value not in allowed or not isinstance(value, str):
            raise ValueError(" or ".join(repr(a) for a in allowed))
        return value

    return check


def _retry(value: object) -> object:
    """Retry options are checked together by the one normalizer,
    :func:`queue_core.rules.policy_from_options` (see :func:`parse_config`)."""
    return value


def _names(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError("a list of exception class names")
    return list(value)


@dataclass(frozen=True, eq=False, repr=False)
class Key(Record):
    """One setting: its dotted name, how a value is checked, its env var and default."""

    name: str
    check: Callable[[object], Any]
    env: str | None
    default: Any
    help: str


KEYS: Final[tuple[Key, ...]] = (
    Key("url", _string, "QUEUE_CORE_URL", "sqlite:///queue_core.db", "storage URL"),
    Key(
        "eager",
        _boolean,
        "QUEUE_CORE_EAGER",
        False,
        "run .delay()/.apply() to the end before returning (tests)",
    ),
    Key("lease", _duration, "QUEUE_CORE_LEASE", 30.0, "lease a worker takes on a job (s)"),
    Key(
        "serializer",
        _choice("json", "pickle"),
        "QUEUE_CORE_SERIALIZER",
        "json",
        "payload and result serializer",
    ),
    Key("worker.slots", _slots, "QUEUE_CORE_WORKER_SLOTS", 8, "jobs a worker runs at once"),
    Key(
        "worker.prefetch",
        _prefetch,
        "QUEUE_CORE_WORKER_PREFETCH",
        None,
        "jobs a worker claims ahead of free slots (default: its slots; 0: none)",
    ),
    Key(
        "worker.queues",
        _queues,
        "QUEUE_CORE_WORKER_QUEUES",
        None,
        "queues a worker takes jobs from (default: every queue of a registered task)",
    ),
    Key(
        "worker.flow_dirs",
        _dirs,
        "QUEUE_CORE_WORKER_FLOW_DIRS",
        None,
        "directories whose type: script flow steps a worker may run (default: none)",
    ),
    Key(
        "worker.http_hosts",
        _hosts,
        "QUEUE_CORE_WORKER_HTTP_HOSTS",
        None,
        "hosts a worker's type: http flow steps may reach; '*' any (default: none)",
    ),
    Key("task.queue", _string, None, "default", "queue of tasks that set none"),
    Key(
        "task.max_retries",
        _retry,
        None,
        0,
        "retries after the first attempt (give this or max_attempts)",
    ),
    Key(
        "task.max_attempts",
        _retry,
        None,
        1,
        "attempts including the first (give this or max_retries)",
    ),
    Key("task.retry_backoff", _retry, None, 1.0, "first retry delay"),
    Key("task.retry_backoff_kind", _retry, None, "exponential", "exponential or fixed backoff"),
    Key("task.retry_coefficient", _retry, None, 2.0, "exponential growth factor"),
    Key("task.retry_max_delay", _retry, None, 600.0, "cap on any retry delay"),
    Key("task.retry_jitter", _retry, None, 0.1, "jitter fraction in [0, 1]"),
    Key("task.non_retryable", _names, None, [], "exception class names never retried"),
    Key(
        "task.timeout",
        _timeout,
        "QUEUE_CORE_DEFAULT_TIMEOUT",
        300.0,
        'bound on one attempt of tasks that set none ("none": no limit)',
    ),
)
_BY_NAME: Final = {k.name: k for k in KEYS}
RETRY_KEYS: Final = frozenset(k.name for k in KEYS if k.check is _retry) | {"task.non_retryable"}
_TABLES: Final = ("worker", "task")


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Setting(Record):
    """One effective value and where it came from.

    Attributes:
        key: the dotted key (``url``, ``worker.slots``, ``task.max_retries``).
        value: the effective value (``None``: not set, the library's own rule applies).
        source: ``"argument"`` (or the CLI option), ``"env NAME"``, ``"file PATH"`` or
            ``"default"``.
    """

    key: str
    value: Any
    source: str


class Config:
    """The settings of one configuration file (or none) plus the environment.

    Attributes:
        path: the file read, or ``None`` when there is none.
        file_values: the validated values of the file by dotted key.
    """

    def __init__(
        self,
        path: Path | None = None,
        file_values: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.path = path
        self.file_values = dict(file_values or {})
        self._environ = os.environ if environ is None else environ

    def get(self, key: str, explicit: Any = UNSET, *, source: str = "argument") -> Setting:
        """The effective value of ``key``: ``explicit`` > env > file > default.

        Raises:
            ConfigError: an env variable holds a bad value (naming the variable).
        """
        spec = _BY_NAME[key]
        if explicit is not UNSET:
            return Setting(key, explicit, source)
        if spec.env:
            raw = self._environ.get(spec.env)
            if raw is not None and raw.strip() != "":
                try:
                    return Setting(key, spec.check(raw), f"env {spec.env}")
                except ValueError as exc:
                    raise _fail(f"env {spec.env}", key, raw, str(exc)) from None
        if key in self.file_values:
            return Setting(key, self.file_values[key], f"file {self.path}")
        return Setting(key, spec.default, "default")

    def value(self, key: str, explicit: Any = UNSET) -> Any:
        """:meth:`get`'s value only."""
        return self.get(key, explicit).value

    def settings(self, explicit: Mapping[str, tuple[Any, str]] | None = None) -> list[Setting]:
        """Every key's effective value, in :data:`KEYS` order.

        Args:
            explicit: ``{key: (value, source)}`` of values given explicitly (the CLI's
                ``--url`` ...).
        """
        given = explicit or {}
        out = []
        for spec in KEYS:
            value, source = given.get(spec.name, (UNSET, "argument"))
            out.append(self.get(spec.name, value, source=source))
        return out


def _flatten(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in data.items():
        if name in _TABLES:
            if not isinstance(value, dict):
                raise _fail(where, name, value, f"a table: [{name}] with its own keys")
            for sub, sub_value in value.items():
                flat[f"{name}.{sub}"] = sub_value
        else:
            flat[name] = value
    return flat


def parse_config(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Validate the settings table of a file; return its values by dotted key.

    Raises:
        ConfigError: ``unknown_option`` for a key that is not a setting (naming the
            accepted keys), ``invalid_option`` for a bad value, ``conflicting_options``
            for ``max_retries`` with ``max_attempts``.
    """
    flat = _flatten(data, where)
    values: dict[str, Any] = {}
    for key, raw in flat.items():
        spec = _BY_NAME.get(key)
        if spec is None:
            import difflib

            close = difflib.get_close_matches(key, list(_BY_NAME), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"unknown setting {key!r} in {where}{hint}; accepted keys are: "
                f"{', '.join(_BY_NAME)}",
                code="unknown_option",
                field=key,
                value=raw,
            )
        try:
            values[key] = spec.check(raw)
        except ValueError as exc:
            raise _fail(where, key, raw, str(exc)) from None
    retry = {k[len("task.") :]: v for k, v in values.items() if k in RETRY_KEYS}
    if retry:
        try:
            policy_from_options(**retry)
        except ConfigError as exc:
            raise ConfigError(
                f"{exc} (in [task] of {where})",
                code=exc.code,
                field=f"task.{exc.field}" if exc.field else None,
                value=exc.value,
            ) from None
    return values


def _read_toml(path: Path) -> dict[str, Any]:
    # tomllib from Python 3.11; the tomli backport (a dependency on 3.10) before that.
    # Imported when a file is read, so importing queue_core does not need it.
    tomllib: Any = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")
    try:
        with path.open("rb") as f:
            data: dict[str, Any] = tomllib.load(f)
            return data
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"invalid configuration file {path}: not TOML ({exc})",
            code="invalid_config",
            field="config",
            value=str(path),
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"invalid configuration file {path}: cannot read it ({exc.strerror or exc})",
            code="invalid_config",
            field="config",
            value=str(path),
        ) from None


def find_config_file(
    cwd: Path | None = None, environ: Mapping[str, str] | None = None
) -> Path | None:
    """The file settings come from: env ``QUEUE_CORE_CONFIG``, else ``./queue-core.toml``,
    else ``./pyproject.toml`` if it has a ``[tool.queue-core]`` table, else ``None``."""
    env = os.environ if environ is None else environ
    named = env.get(ENV_CONFIG)
    if named:
        return Path(named)
    base = Path.cwd() if cwd is None else cwd
    own = base / CONFIG_FILE
    if own.is_file():
        return own
    pyproject = base / PYPROJECT
    if pyproject.is_file():
        try:
            text = pyproject.read_text(encoding="utf-8")
        except OSError:
            return None
        if "queue-core" in text:  # cheap check before parsing a large pyproject
            return pyproject
    return None


def load_config(cwd: Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read and validate the configuration file (see :func:`find_config_file`).

    Raises:
        ConfigError: the file is not TOML, cannot be read, or holds an unknown key or a
            bad value (the message names the file and the key).
    """
    path = find_config_file(cwd, environ)
    if path is None:
        return Config(None, {}, environ)
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    except OSError:
        key = None
    if key is not None and key in _CACHE:
        found, values = _CACHE[key]
        return Config(found, values, environ)
    config = _load(path, environ)
    if key is not None:
        if len(_CACHE) > 32:
            _CACHE.clear()
        _CACHE[key] = (config.path, dict(config.file_values))
    return config


_CACHE: dict[tuple[str, int, int], tuple[Path | None, dict[str, Any]]] = {}
"""Validated files by (path, mtime, size): every ``Queue()`` reads the configuration."""


def _load(path: Path, environ: Mapping[str, str] | None) -> Config:
    data = _read_toml(path)
    if path.name == PYPROJECT:
        tool = data.get("tool", {})
        table = tool.get("queue-core") if isinstance(tool, dict) else None
        if table is None:
            return Config(None, {}, environ)
        where = f"{path} [tool.queue-core]"
    else:
        table, where = data, str(path)
    if not isinstance(table, dict):
        raise _fail(str(path), "tool.queue-core", table, "a table")
    return Config(path, parse_config(table, where), environ)


ENV_URL = "QUEUE_CORE_URL"


DEFAULT_URL = "sqlite:///queue_core.db"


def resolve_url(url: str | None) -> str:
    """The URL to use: ``url``, else env ``QUEUE_CORE_URL``, else ``url`` of the
    configuration file (``queue-core.toml`` / ``[tool.queue-core]``, see
    :mod:`queue_core.app.config`), else the embedded default.

    Raises:
        ConfigError: ``invalid_url`` for an empty or blank ``url`` (``None`` is "not
            given"; an empty string is a mistake, not the default).
    """
    if url is not None and not isinstance(url, str):
        raise ConfigError(
            f"invalid storage URL {url!r}: expected a string such as sqlite:///queue.db "
            "(or storage=<a Storage> for a storage object)",
            code="invalid_url",
            field="url",
            value=url,
        )
    if url is not None and not url.strip():
        raise ConfigError(
            f"invalid storage URL {url!r}: it is empty — give a URL such as "
            "sqlite:///queue.db, or None (the default) for env QUEUE_CORE_URL, the "
            "configuration file or ./queue_core.db",
            code="invalid_url",
            field="url",
            value=url,
        )
    if url:
        return url
    env = os.environ.get(ENV_URL)
    if env:
        return env
    from_file = load_config().file_values.get("url")
    if from_file:
        return str(from_file)
    return DEFAULT_URL


def open_storage(url: str | None = None) -> Storage:
    """Build the storage for ``url`` (see :func:`resolve_url` for the fallbacks).

    Raises:
        ConfigError: as :func:`~queue_core.storage.registry.backend_class`;
            ``invalid_url`` also for a SQLite URL that names no file (``sqlite://``,
            ``sqlite://queue.db``, ``:memory:``), which would be a private in-memory
            database (:func:`~queue_core.storage.urls.check_sqlite_url`).
    """
    resolved = resolve_url(url)
    check_sqlite_url(resolved)
    factory = backend_class(resolved)
    try:
        return factory.from_url(resolved)
    except ConfigError:
        raise
    except ValueError as exc:
        # a URL parser's own error ("Invalid IPv6 URL", a port that is not a number),
        # which may quote a piece of a password: scrubbed
        masked = mask_url(resolved)
        raise ConfigError(
            f"invalid storage URL {masked!r}: {redact(str(exc), resolved)}",
            code="invalid_url",
            field="url",
            value=masked,
        ) from None


def file_retry_policy(cfg: Config) -> RetryPolicy | None:
    """The queue-wide retry defaults of the file's ``[task]`` table, or ``None``."""
    given = {
        key[len("task.") :]: value for key, value in cfg.file_values.items() if key in RETRY_KEYS
    }
    if not given:
        return None
    return policy_from_options(**given)
