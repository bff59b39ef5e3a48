"""URL helpers (queue_core.urls) and the scheme registry's StorageFactory contract."""

from __future__ import annotations

import pytest

from backends.memory import MemoryStorage
from queue_core import registry
from queue_core.errors import ConfigError
from queue_core.storage import Storage
from queue_core.urls import mask_url


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
    storage = registry.open_storage("fakedb://somewhere")
    assert isinstance(storage, MemoryStorage)
    assert _Factory.built[-1] == "fakedb://somewhere"


@pytest.mark.parametrize("attr", ["_NotAFactory", "_missing_attribute"])
def test_a_target_without_from_url_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, attr: str
) -> None:
    monkeypatch.setattr(registry, "_third_party", lambda: {"fakedb": f"{__name__}:{attr}"})
    with pytest.raises(ConfigError) as info:
        registry.open_storage("fakedb://u:secret@somewhere")
    assert info.value.code == "invalid_backend"
    assert "fakedb" in str(info.value) and attr in str(info.value)
    assert "from_url" in str(info.value)
    assert "secret" not in str(info.value)
