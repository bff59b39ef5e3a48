"""SQL storage URLs and their options, parsed without importing SQLAlchemy.

Importing SQLAlchemy costs more than the rest of a worker's start-up, and the SQL backend
runs every job on plain DBAPI connections; SQLAlchemy is needed only to create or migrate
the schema. So URLs are parsed here, the way ``sqlalchemy.engine.make_url`` does (same
pattern, same unquoting, same rendering), and the schema engine gets the rendered string.
The backend's own query options (``retention``; PostgreSQL's ``pgbouncer`` and
``socket_timeout``) are checked and removed here (:func:`split_url`,
:func:`session_options`) before the URL reaches a driver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from urllib.parse import parse_qsl, quote, quote_plus, unquote

from queue_core.records.base import Record
from queue_core.records.errors import ConfigError
from queue_core.rules.outcomes import parse_retention
from queue_core.storage.urls import mask_url, redact

__all__ = ["SOCKET_TIMEOUT_S", "SQLURL", "parse_sql_url", "session_options", "split_url"]

SOCKET_TIMEOUT_S = 30.0
"""Default bound on one PostgreSQL call (``?socket_timeout=<seconds>``; ``0`` = none): a
call still waiting after it has its connection cut (:mod:`backends.sql.watchdog`) and
fails with ``StorageUnavailable``."""

_PG_DRIVERS = {"postgresql", "postgres", "postgresql+psycopg"}
_SQLITE_DRIVERS = {"sqlite", "sqlite+pysqlite"}
_SQLITE_QUERY = ("retention", "timeout", "check_same_thread", "uri")
_FLAGS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}

_PATTERN = re.compile(
    r"""
        (?P<name>[\w\+]+)://
        (?:
            (?P<username>[^:/]*)
            (?::(?P<password>[^@]*))?
        @)?
        (?:
            (?:
                \[(?P<ipv6host>[^/\?]+)\] |
                (?P<ipv4host>[^/:\?]+)
            )?
            (?::(?P<port>[^/\?]*))?
        )?
        (?:/(?P<database>[^\?]*))?
        (?:\?(?P<query>.*))?
    """,
    re.X,
)


@dataclass(frozen=True, eq=False, repr=False)
class SQLURL(Record):
    """The parts of a SQL storage URL (``query`` keeps repeated keys, in order)."""

    drivername: str
    username: str | None = None
    password: str | None = None
    host: str | None = None
    port: int | None = None
    database: str | None = None
    query: tuple[tuple[str, str], ...] = ()

    @property
    def backend_name(self) -> str:
        """The database part of the scheme: ``postgresql`` for ``postgresql+psycopg``."""
        return self.drivername.split("+", 1)[0]

    def get(self, key: str) -> str | None:
        """The last value of query parameter ``key``, or ``None``."""
        found = [v for k, v in self.query if k == key]
        return found[-1] if found else None

    def without(self, key: str) -> SQLURL:
        """This URL without query parameter ``key``."""
        return replace(self, query=tuple((k, v) for k, v in self.query if k != key))

    def with_driver(self, drivername: str) -> SQLURL:
        """This URL with another scheme."""
        return replace(self, drivername=drivername)

    def render(self, *, hide_password: bool = True) -> str:
        """The URL as text, as ``sqlalchemy.engine.URL.render_as_string`` writes it."""
        s = self.drivername + "://"
        if self.username is not None:
            s += quote(self.username, safe=" +")
            if self.password is not None:
                s += ":" + ("***" if hide_password else quote(self.password, safe=" +"))
            s += "@"
        if self.host is not None:
            s += f"[{self.host}]" if ":" in self.host else self.host
        if self.port is not None:
            s += ":" + str(self.port)
        if self.database is not None:
            s += "/" + quote(self.database, safe=" +/")
        if self.query:
            s += "?" + "&".join(
                f"{quote_plus(k)}={quote_plus(v)}" for k, v in sorted(self.query, key=_key)
            )
        return s


def _key(pair: tuple[str, str]) -> str:
    return pair[0]


def parse_sql_url(url: str) -> SQLURL:
    """Parse ``url`` like ``sqlalchemy.engine.make_url``.

    Raises:
        ValueError: ``url`` is not ``scheme://...`` or its port is not a number.
    """
    m = _PATTERN.match(url)
    if m is None:
        raise ValueError("Could not parse SQLAlchemy URL from given URL string")
    parts = m.groupdict()
    port = parts["port"]
    if port:
        try:
            port_number: int | None = int(port)
        except ValueError:
            raise ValueError(f"invalid port {port!r}") from None
    else:
        port_number = None
    query = tuple(parse_qsl(parts["query"])) if parts["query"] is not None else ()
    return SQLURL(
        drivername=parts["name"],
        username=unquote(parts["username"]) if parts["username"] is not None else None,
        password=unquote(parts["password"]) if parts["password"] is not None else None,
        host=parts["ipv4host"] or parts["ipv6host"],
        port=port_number,
        database=unquote(parts["database"]) if parts["database"] is not None else None,
        query=query,
    )


def split_url(url: str) -> tuple[SQLURL, int | None]:
    """Parse ``url``; strip and parse ``?retention=``; map PostgreSQL to psycopg.

    Raises:
        ConfigError: a malformed URL, an unsupported scheme, a bad retention or an
            unknown ``sqlite://`` option.
    """
    try:
        sa_url = parse_sql_url(url)
    except ValueError as exc:
        raise ConfigError(
            f"invalid SQL storage URL {mask_url(url)!r}: {redact(str(exc), url)}",
            code="invalid_url", field="url", value=mask_url(url),
        ) from None  # fmt: skip
    retention: int | None = None
    raw = sa_url.get("retention")
    if raw is not None:
        retention = parse_retention(raw)
        sa_url = sa_url.without("retention")
    driver = sa_url.drivername.lower()
    if driver in _PG_DRIVERS:
        sa_url = sa_url.with_driver("postgresql+psycopg")
    elif driver in _SQLITE_DRIVERS:
        _check_sqlite_query(sa_url, url)
    else:
        raise ConfigError(
            f"unsupported SQL URL scheme {driver!r} in {mask_url(url)!r}: use sqlite:///path.db "
            "or postgresql+psycopg://user:password@host/db",
            code="unknown_scheme", field="url", value=driver,
        )  # fmt: skip
    return sa_url, retention


def _check_sqlite_query(sa_url: SQLURL, url: str) -> None:
    """Refuse a query option the SQLite driver would ignore (SQLAlchemy only warns): a
    typo such as ``?retension=1d`` must not pass silently. With ``uri=true`` the SQLite
    URI options (``mode``, ``cache``...) are the driver's to judge."""
    if (sa_url.get("uri") or "").lower() == "true":
        return
    unknown = sorted({k for k, _ in sa_url.query if k not in _SQLITE_QUERY})
    if unknown:
        raise ConfigError(
            f"unknown sqlite:// option(s) {', '.join(map(repr, unknown))} in {mask_url(url)!r}; "
            f"supported: {', '.join(_SQLITE_QUERY)}",
            code="invalid_option", field="url", value=unknown[0],
        )  # fmt: skip


def session_options(url: SQLURL, where: str) -> tuple[SQLURL, bool, float]:
    """PostgreSQL's own options: (``url`` without them, ``pgbouncer``, ``socket_timeout``
    in seconds; :data:`SOCKET_TIMEOUT_S` by default, ``0`` = no bound).

    Raises:
        ConfigError: ``pgbouncer`` not a flag, or ``socket_timeout`` not a number >= 0.
    """
    raw = url.get("pgbouncer")
    flag = _FLAGS.get((raw or "false").lower())
    if flag is None:
        raise ConfigError(
            f"pgbouncer={raw!r} in {where!r}: use pgbouncer=true or pgbouncer=false",
            code="invalid_option", field="pgbouncer", value=raw,
        )  # fmt: skip
    raw = url.get("socket_timeout")
    try:
        bound = SOCKET_TIMEOUT_S if raw is None else float(raw)
    except ValueError:
        bound = -1.0
    if not bound >= 0 or bound == float("inf"):
        raise ConfigError(
            f"socket_timeout={raw!r} in {where!r}: use a number of seconds >= 0 (0 = no bound)",
            code="invalid_option", field="socket_timeout", value=raw,
        )  # fmt: skip
    return url.without("pgbouncer").without("socket_timeout"), flag, bound


def check_pg_query(url: SQLURL, where: str, known: frozenset[str]) -> None:
    """Refuse a PostgreSQL URL option that is neither ours (stripped before) nor one of
    libpq's connection keywords ``known``: libpq refuses it only at the first connection,
    as a driver error that a worker would retry as an outage.

    Raises:
        ConfigError: ``invalid_option`` naming the first unknown option.
    """
    unknown = sorted({k for k, _ in url.query if k not in known})
    if unknown:
        raise ConfigError(
            f"unknown postgresql:// option(s) {', '.join(map(repr, unknown))} in {where!r}; "
            "supported: retention, pgbouncer, socket_timeout and libpq's connection "
            "parameters (sslmode, connect_timeout, application_name, options, ...)",
            code="invalid_option", field="url", value=unknown[0],
        )  # fmt: skip
