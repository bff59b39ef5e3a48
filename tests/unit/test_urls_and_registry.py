"""URL helpers (queue_core.storage.urls) and the scheme registry's StorageFactory contract."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from backends.memory import MemoryStorage
from queue_core.app.config import open_storage
from queue_core.records.errors import ConfigError
from queue_core.storage import registry
from queue_core.storage.protocol import Storage
from queue_core.storage.urls import mask_url, redact, url_secrets
from tests.url_shapes import SHAPES, Shape


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://user:secret@localhost:6379/0", "redis://user:***@localhost:6379/0"),
        ("postgresql://u:p%40ss@db/jobs?x=1", "postgresql://u:***@db/jobs?x=1"),
        ("redis://:secret@h/0", "redis://:***@h/0"),
        ("postgresql://u:pw@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
        ("sqlite:///jobs.db", "sqlite:///jobs.db"),
        ("redis://user@h/0", "redis://user@h/0"),
        # a port out of range used to raise ValueError from inside mask_url
        ("redis://u:secret@h:99999/0", "redis://u:***@h:99999/0"),
        ("http://[::1", "http://[::1"),
        # unencoded /, # and ? in a password: urlsplit ends the authority there
        ("postgresql://app:se/cret@db/jobs", "postgresql://app:***@db/jobs"),
        (
            "postgresql+psycopg://app:a#secret@db:5432/jobs",
            "postgresql+psycopg://app:***@db:5432/jobs",
        ),
        ("redis://:what?secret@h:6379/0?prefix=x", "redis://:***@h:6379/0?prefix=x"),
        ("redis+cluster://u:s/e#c?ret@h:7000/?prefix=p", "redis+cluster://u:***@h:7000/?prefix=p"),
        ("sqlite:///data/a:b@c.db", "sqlite:///data/a:b@c.db"),
    ],
)
def test_mask_url_hides_passwords(url: str, masked: str) -> None:
    assert mask_url(url) == masked
    assert "secret" not in mask_url(url)


def test_registry_still_exports_mask_url() -> None:
    assert registry.mask_url is mask_url


class _NotAFactory:
    """Registered by a (pretend) third-party entry point, but has no ``from_url``."""


class _Factory:
    built: list[str] = []

    @classmethod
    def from_url(cls, url: str) -> Storage:
        cls.built.append(url)
        return MemoryStorage()


def test_open_storage_calls_the_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    target = f"{__name__}:_Factory"
    monkeypatch.setattr(registry, "_third_party", lambda: {"fakedb": target})
    storage = open_storage("fakedb://somewhere")
    assert isinstance(storage, MemoryStorage)
    assert _Factory.built[-1] == "fakedb://somewhere"


@pytest.mark.parametrize("attr", ["_NotAFactory", "_missing_attribute"])
def test_a_target_without_from_url_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, attr: str
) -> None:
    monkeypatch.setattr(registry, "_third_party", lambda: {"fakedb": f"{__name__}:{attr}"})
    with pytest.raises(ConfigError) as info:
        open_storage("fakedb://u:secret@somewhere")
    assert info.value.code == "invalid_backend"
    assert "fakedb" in str(info.value) and attr in str(info.value)
    assert "from_url" in str(info.value)
    assert "secret" not in str(info.value)


def _distribution(root: Path, name: str, scheme: str, target: str, modules: dict[str, str]) -> None:
    """Install a distribution the way pip leaves one: its modules and a ``*.dist-info``
    directory with METADATA and the ``queue_core.backends`` entry point."""
    for rel, text in modules.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    info = root / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[queue_core.backends]\n{scheme} = {target}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path that distributions can be installed into."""
    monkeypatch.syspath_prepend(str(tmp_path))
    registry._third_party.cache_clear()
    yield tmp_path
    registry._third_party.cache_clear()
    for name in [m for m in sys.modules if m.startswith("acme_")]:
        del sys.modules[name]


def test_a_third_party_missing_driver_names_its_distribution(site: Path) -> None:
    _distribution(
        site,
        "acme-queue-backend",
        "acme",
        "acme_backend.storage:AcmeStorage",
        {
            "acme_backend/__init__.py": "",
            "acme_backend/storage.py": "import acme_driver_not_installed\n",
        },
    )
    with pytest.raises(ConfigError) as info:
        open_storage("acme://u:secret@host/db")
    message = str(info.value)
    assert info.value.code == "missing_driver"
    assert "'acme_driver_not_installed'" in message
    assert "'acme-queue-backend'" in message and "pip install acme-queue-backend" in message
    assert "queue-core" not in message and "secret" not in message


def test_a_third_party_backend_whose_own_module_is_gone_says_reinstall_it(site: Path) -> None:
    _distribution(site, "acme-gone", "acmegone", "acme_gone.storage:GoneStorage", {})
    with pytest.raises(ConfigError) as info:
        open_storage("acmegone://host")
    assert info.value.code == "missing_driver"
    assert "pip install --force-reinstall acme-gone" in str(info.value)
    assert "queue-core" not in str(info.value)


def test_a_built_in_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # `import redis` raises ImportError
    for name in [m for m in sys.modules if m.startswith("backends.redis")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ConfigError) as info:
        registry.backend_class("redis://localhost")
    assert info.value.code == "missing_driver"
    assert "pip install 'queue-core[redis]'" in str(info.value)


def test_a_scheme_needs_installed_metadata_not_only_a_package_on_sys_path(site: Path) -> None:
    """An entry point is read from a distribution's metadata: the same package on
    sys.path without a ``*.dist-info`` directory registers no scheme."""
    (site / "acme_plain").mkdir()
    (site / "acme_plain" / "__init__.py").write_text(
        "from backends.memory import MemoryStorage\n\n"
        "class PlainStorage(MemoryStorage):\n"
        "    @classmethod\n"
        "    def from_url(cls, url):\n"
        "        return cls()\n"
    )
    with pytest.raises(ConfigError) as info:
        open_storage("acmeplain://")
    assert info.value.code == "unknown_scheme"
    _distribution(site, "acme-plain", "acmeplain", "acme_plain:PlainStorage", {})
    registry._third_party.cache_clear()
    assert isinstance(open_storage("acmeplain://"), MemoryStorage)


# --------------------------------------------------------------------------- SQLite URLs


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://queue.db",
        "sqlite://",
        ":memory:",
        "sqlite:///:memory:",
        "sqlite://:memory:",
        "sqlite+pysqlite://queue.db",
        "SQLITE://queue.db?timeout=3",
        "sqlite:////",
        "sqlite:///jobs/",
        "sqlite:///file::memory:?cache=shared&uri=true",
        "sqlite:///file:x?mode=memory&uri=true",
    ],
)
def test_a_sqlite_url_that_names_no_file_is_refused(
    url: str, tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from queue_core import Queue

    monkeypatch.chdir(tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as info:
        Queue(url)
    err = info.value
    assert err.code == "invalid_url" and err.field == "url"
    assert "sqlite:///queue.db" in str(err)  # the three-slash form
    assert "memory://" in str(err)
    assert list(tmp_path.iterdir()) == []  # type: ignore[attr-defined]


def test_two_slashes_name_the_missing_slash_with_the_url_given() -> None:
    with pytest.raises(ConfigError) as info:
        open_storage("sqlite://orders.db?timeout=3")
    text = str(info.value)
    assert "two slashes" in text and "'orders.db' is read as a host name" in text
    assert "did you mean sqlite:///orders.db?timeout=3 (three slashes)?" in text


def test_a_path_that_ends_with_a_slash_is_named_a_directory() -> None:
    with pytest.raises(ConfigError) as info:
        open_storage("sqlite:////var/lib/")
    assert "its path '/var/lib/' ends with '/': a directory, not a file" in str(info.value)


def test_two_slashes_with_credentials_never_echo_them() -> None:
    with pytest.raises(ConfigError) as info:
        open_storage("sqlite://user:hunter2@x.db")
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    "url",
    ["sqlite:///jobs.db", "sqlite:////tmp/x/jobs.db", "sqlite:///file:x.db?mode=ro&uri=true"],
)
def test_sqlite_urls_that_name_a_file_pass(url: str) -> None:
    from queue_core.storage.urls import check_sqlite_url

    check_sqlite_url(url)


def test_memory_scheme_is_still_the_in_process_queue() -> None:
    from queue_core import Queue

    queue = Queue("memory://")
    assert isinstance(queue.storage(), MemoryStorage)


# --------------------------------------------------------------------------- the URL table


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.url)
def test_every_shape_in_the_table_is_masked_whole(shape: Shape) -> None:
    assert len(SHAPES) >= 30
    shown = mask_url(shape.url)
    assert shown == shape.masked
    for secret in shape.secrets:
        assert secret not in shown
    assert mask_url(shown) == shown  # masking twice changes nothing


def _driver_passwords(url: str) -> list[str]:
    """What the URL's driver logs in with: SQLAlchemy's ``make_url`` (password and
    ``?password=``) for SQL URLs, redis-py's ``parse_url`` for Redis ones."""
    scheme = url.partition("://")[0]
    found: list[str] = []
    if scheme.startswith("postgres"):
        parsed = make_url(url)
        found += [parsed.password or ""]
        found += [str(v) for k, v in parsed.query.items() if "password" in k]
    elif scheme.startswith("redis"):
        try:  # redis-py is an extra: the check runs wherever it is installed (CI: always)
            from redis.connection import parse_url as parse_redis_url
        except ImportError:
            return found
        try:
            kwargs = parse_redis_url(url.replace("+cluster://", "://", 1))
        except ValueError:  # redis-py refuses it: the backend never logs in with it
            return []
        found += [str(kwargs.get("password", ""))]
    return [p for p in found if p]


@pytest.mark.parametrize("shape", [s for s in SHAPES if _driver_passwords(s.url)], ids=str)
def test_what_the_driver_logs_in_with_is_never_shown(shape: Shape) -> None:
    for password in _driver_passwords(shape.url):
        assert password not in mask_url(shape.url)
        assert password not in redact(f"driver said: {password} / {shape.url}", shape.url)


@pytest.mark.parametrize(
    ("text", "url", "shown"),
    [
        # SQLAlchemy ends the password at the first '@': the host it reports starts with
        # the rest of the password
        (
            "failed to resolve host 'Wx9@127.0.0.1'",
            "postgresql://u:Zq7@Wx9@127.0.0.1/db",
            "failed to resolve host '***@127.0.0.1'",
        ),
        ("invalid port 'Zq7'", "redis://u:Zq7/Wx9@h:1/0", "invalid port '***'"),
        ("no password in here", "redis://u:pw@h/0", "no password in here"),
        ("bad redis://u:pw@h/0 here", "redis://u:pw@h/0", "bad redis://u:***@h/0 here"),
        ("auth failed for Zq7Wx9", "redis://h/0?password=Zq7Wx9", "auth failed for ***"),
        ("anything", None, "anything"),
    ],
)
def test_redact_scrubs_the_url_and_pieces_of_its_secrets(
    text: str, url: str | None, shown: str
) -> None:
    assert redact(text, url) == shown


def test_url_secrets_lists_the_password_and_credential_parameters() -> None:
    secrets = url_secrets("postgresql://u:Zq7%2FWx9@h/db?password=Other1&x=1")
    assert {"Zq7%2FWx9", "Zq7/Wx9", "Zq7", "Wx9", "Other1"} <= set(secrets)
    assert "h" not in secrets and "db" not in secrets
    assert secrets == sorted(secrets, key=lambda s: (-len(s), s))


@pytest.mark.parametrize("url", ["", "   "])
def test_an_empty_url_is_refused_not_taken_for_the_default(
    url: str, tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from queue_core import Queue

    monkeypatch.chdir(tmp_path)  # type: ignore[arg-type]
    monkeypatch.delenv("QUEUE_CORE_URL", raising=False)
    with pytest.raises(ConfigError) as info:
        Queue(url)
    assert info.value.code == "invalid_url" and "it is empty" in str(info.value)
    assert list(tmp_path.iterdir()) == []  # type: ignore[attr-defined]  # no default file


@pytest.mark.parametrize(
    ("kw", "code", "field", "words"),
    [
        ({"url": 5}, "invalid_url", "url", "invalid storage URL 5: expected a string"),
        ({"storage": 5}, "invalid_option", "storage", "invalid storage: 5 — expected a Storage"),
        ({"storage": "memory://"}, "invalid_option", "storage", "a URL goes in url="),
        ({"url": "memory://", "eager": "maybe"}, "invalid_option", "eager", "'maybe'"),
    ],
)
def test_a_queue_argument_of_the_wrong_kind_is_a_config_error(
    kw: dict[str, object], code: str, field: str, words: str
) -> None:
    """Not an ``AttributeError`` at once or at the first ``delay()``."""
    from queue_core import Queue

    with pytest.raises(ConfigError) as info:
        Queue(**kw)  # type: ignore[arg-type]
    assert (info.value.code, info.value.field) == (code, field)
    assert words in str(info.value)
