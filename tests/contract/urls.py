"""URL helpers of the contract test modules."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tests.servers.ports import free_port


def with_option(url: str, name: str, value: str) -> str:
    """``url`` with the query option ``name=value`` set (replacing one already there)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != name]
    query.append((name, value))
    return urlunsplit(parts._replace(query=urlencode(query)))


def unreachable_postgres_url(password: str, options: str = "") -> str:
    """A PostgreSQL URL with ``password`` whose server does not answer (a closed port)."""
    return f"postgresql://qc:{password}@127.0.0.1:{free_port()}/qc{options}"
