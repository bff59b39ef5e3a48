"""Storage URL shapes that carry credentials, with how each must be shown, for the masking
tests (``tests/unit/test_urls_and_registry.py`` and ``tests/integration/test_url_masking.py``).

Every password holds the marker :data:`MARK` and, after its odd character, :data:`TAIL`:
neither may appear in any output. Hosts are loopback addresses, ``localhost`` or socket
paths, and closed ports (``:1``), so that a driver that connects is refused at once; a
shape whose driver would read a piece of the password as a host name (and look it up in
DNS) is never connected to (see :func:`connects_to_loopback_only`).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

MARK = "Zq7"
TAIL = "Wx9"
GEN_DELIMS = ":/?#[]@"
SUB_DELIMS = "!$&'()*+,;="


@dataclass(frozen=True)
class Shape:
    """A URL and what :func:`queue_core.storage.urls.mask_url` must make of it."""

    url: str
    masked: str

    @property
    def scheme(self) -> str:
        return self.url.partition("://")[0]

    @property
    def secrets(self) -> tuple[str, ...]:
        """What must never be shown (empty for a URL without a password)."""
        return (MARK, TAIL) if MARK in self.url else ()


def _redis_char(c: str) -> Shape:
    return Shape(
        f"redis://u:{MARK}{c}{TAIL}@127.0.0.1:1/0?prefix=p", "redis://u:***@127.0.0.1:1/0?prefix=p"
    )


def _pg_char(c: str) -> Shape:
    return Shape(
        f"postgresql://u:{MARK}{c}{TAIL}@127.0.0.1:1/db", "postgresql://u:***@127.0.0.1:1/db"
    )


SHAPES: list[Shape] = [
    # a password holding each reserved character (RFC 3986), '%' and a space, raw
    *(_redis_char(c) for c in GEN_DELIMS + SUB_DELIMS + "% "),
    *(_pg_char(c) for c in GEN_DELIMS + "%&="),
    # percent-encoded, as the docs ask
    Shape(f"postgresql://u:{MARK}%40{TAIL}@127.0.0.1:1/db", "postgresql://u:***@127.0.0.1:1/db"),
    Shape(f"redis://u:{MARK}%2F{TAIL}@127.0.0.1:1/0", "redis://u:***@127.0.0.1:1/0"),
    # ?password= (libpq and redis-py log in with it) and other credential parameters
    Shape(
        f"postgresql://u@127.0.0.1:1/db?password={MARK}{TAIL}",
        "postgresql://u@127.0.0.1:1/db?password=***",
    ),
    Shape(
        f"postgresql://u:{MARK}{TAIL}@127.0.0.1:1/db?sslmode=disable&password={MARK}x{TAIL}",
        "postgresql://u:***@127.0.0.1:1/db?sslmode=disable&password=***",
    ),
    Shape(
        f"postgresql://u@127.0.0.1:1/db?sslpassword={MARK}{TAIL}&connect_timeout=2",
        "postgresql://u@127.0.0.1:1/db?sslpassword=***&connect_timeout=2",
    ),
    Shape(
        f"redis://127.0.0.1:1/0?password={MARK}{TAIL}&prefix=p",
        "redis://127.0.0.1:1/0?password=***&prefix=p",
    ),
    Shape(
        f"redis://someone@127.0.0.1:1/0?prefix=p&password={MARK}%26{TAIL}",
        "redis://someone@127.0.0.1:1/0?prefix=p&password=***",
    ),
    # IPv6 hosts
    Shape(f"postgresql://u:{MARK}{TAIL}@[::1]:1/db", "postgresql://u:***@[::1]:1/db"),
    Shape(f"redis://:{MARK}@{TAIL}@[::1]:1/0", "redis://:***@[::1]:1/0"),
    # sockets
    Shape(
        f"postgresql://u:{MARK}{TAIL}@/db?host=/tmp/qc-no-such-dir",
        "postgresql://u:***@/db?host=/tmp/qc-no-such-dir",
    ),
    Shape(
        f"postgresql://u:{MARK}@{TAIL}@/db?host=/tmp/qc-no-such-dir",
        "postgresql://u:***@/db?host=/tmp/qc-no-such-dir",
    ),
    Shape(  # redis-py's socket URL: no backend serves unix://, refused by scheme
        f"unix://:{MARK}{TAIL}@/tmp/qc-no-such.sock?db=0", "unix://:***@/tmp/qc-no-such.sock?db=0"
    ),
    # a raw '@' where the driver connects by address anyway (libpq's hostaddr)
    Shape(
        f"postgresql+psycopg://u:{MARK}@{TAIL}@127.0.0.1:1/db?hostaddr=127.0.0.1",
        "postgresql+psycopg://u:***@127.0.0.1:1/db?hostaddr=127.0.0.1",
    ),
    # TLS and cluster schemes
    Shape(f"rediss://default:{MARK}{TAIL}@127.0.0.1:1/0", "rediss://default:***@127.0.0.1:1/0"),
    Shape(
        f"redis+cluster://u:{MARK}{TAIL}@127.0.0.1:1/?prefix=p",
        "redis+cluster://u:***@127.0.0.1:1/?prefix=p",
    ),
    Shape(
        f"rediss+cluster://u:{MARK}@{TAIL}@127.0.0.1:1/?prefix=p",
        "rediss+cluster://u:***@127.0.0.1:1/?prefix=p",
    ),
    # sqs: an endpoint with userinfo (plain and percent-encoded), credentials in the URL
    Shape(
        f"sqs://?region=us-east-1&endpoint_url=http://ak:{MARK}{TAIL}@127.0.0.1:1&create=false",
        "sqs://?region=us-east-1&endpoint_url=http://ak:***@127.0.0.1:1&create=false",
    ),
    Shape(
        f"sqs://?region=us-east-1&endpoint_url=http%3A%2F%2Fak%3A{MARK}{TAIL}%40127.0.0.1%3A1"
        "&create=false",
        "sqs://?region=us-east-1&endpoint_url=http://ak:***@127.0.0.1:1&create=false",
    ),
    Shape(
        f"sqs://AKIAEXAMPLE:{MARK}{TAIL}@?region=us-east-1",
        "sqs://AKIAEXAMPLE:***@?region=us-east-1",
    ),
    # user only, empty password, an '@' in a query value, no credential at all
    Shape("redis://someone@127.0.0.1:1/0", "redis://someone@127.0.0.1:1/0"),
    Shape("redis://u:@127.0.0.1:1/0", "redis://u:***@127.0.0.1:1/0"),
    Shape("postgresql://u:@127.0.0.1:1/db", "postgresql://u:***@127.0.0.1:1/db"),
    Shape(
        f"postgresql://u:{MARK}{TAIL}@127.0.0.1:1/db?application_name=me@x",
        "postgresql://u:***@127.0.0.1:1/db?application_name=me@x",
    ),
    Shape("sqlite:////tmp/qc-no-such-dir/a:b@c.db", "sqlite:////tmp/qc-no-such-dir/a:b@c.db"),
    # a scheme no backend serves
    Shape(f"fakedb://u:{MARK}{TAIL}@127.0.0.1:1/x", "fakedb://u:***@127.0.0.1:1/x"),
]

_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def _sql_hosts(url: str) -> list[str] | None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
        parsed.port  # noqa: B018
    except (ArgumentError, ValueError):
        return None
    query = {k: (v if isinstance(v, str) else v[-1]) for k, v in parsed.query.items()}
    if query.get("hostaddr"):
        return [query["hostaddr"]]
    hosts = [h for h in (parsed.host, query.get("host")) if h]
    return hosts or ["/default-socket"]


def _redis_hosts(url: str) -> list[str] | None:
    from redis.connection import parse_url

    plain = url.replace("+cluster://", "://", 1)
    try:
        kwargs = parse_url(plain)
        urlsplit(plain).port  # noqa: B018 - the backend refuses a bad port first
    except ValueError:
        return None
    if kwargs.get("unix_socket_path"):
        return [str(kwargs["unix_socket_path"])]
    return [str(kwargs.get("host", "localhost"))]


def _sqs_hosts(url: str) -> list[str] | None:
    parts = urlsplit(url)
    if parts.username or parts.password:
        return None  # refused before any client is made
    endpoint = parse_qs(parts.query).get("endpoint_url")
    if not endpoint:
        return ["amazonaws.com"]
    return [urlsplit(unquote(endpoint[-1])).hostname or ""]


def connects_to_loopback_only(shape: Shape) -> bool:
    """Whether opening ``shape.url`` and using it reaches only loopback addresses or
    socket paths, judged by the drivers' own parsers (SQLAlchemy's ``make_url``,
    redis-py's ``parse_url``): a shape whose driver would take a piece of the password
    for a host name is never connected to (that would be a DNS query)."""
    scheme = shape.scheme
    if scheme.startswith("postgres"):
        hosts = _sql_hosts(shape.url)
    elif scheme.startswith("redis"):
        hosts = _redis_hosts(shape.url)
    elif scheme == "sqs":
        hosts = _sqs_hosts(shape.url)
    else:
        return True  # sqlite files and unknown schemes open nothing on the network
    return hosts is None or all(h in _LOOPBACK or h.startswith("/") for h in hosts)
