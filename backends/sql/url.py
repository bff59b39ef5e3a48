"""SQL storage URLs, parsed without importing SQLAlchemy.

Importing SQLAlchemy costs more than the rest of a worker's start-up, and the SQL backend
runs every job on plain DBAPI connections; SQLAlchemy is needed only to create or migrate
the schema. So URLs are parsed here, the way ``sqlalchemy.engine.make_url`` does (same
pattern, same unquoting, same rendering), and the schema engine gets the rendered string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from urllib.parse import parse_qsl, quote, quote_plus, unquote

from queue_core.record import Record

__all__ = ["SQLURL", "parse_sql_url"]

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
