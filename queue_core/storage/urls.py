"""URL helpers for backends and the facade, beside the :mod:`~queue_core.storage.protocol` protocol.

A storage URL may carry credentials (``postgresql://user:secret@host/db``,
``redis://host/0?password=secret``). Anything that shows a URL -- a ``repr``, a log line,
a :class:`~queue_core.records.errors.ConfigError`, the CLI, the dashboard -- passes it through
:func:`mask_url` first, and a message that may quote pieces of one (a driver's error)
through :func:`redact`, so a password never leaves the process in text.

How a password is found follows how the drivers read a URL, and masks what any of them
would read as one:

* SQLAlchemy (``make_url``: ``sqlite``, ``postgresql``) reads the password from the first
  ``:`` of the userinfo to the *first* ``@`` after it; a raw ``/``, ``?`` or ``#`` in it
  stays in the password.
* redis-py (``urllib.parse``: ``redis``, ``rediss``, ``sqs``) ends the authority at the
  first ``/``, ``?`` or ``#`` and reads the password up to the *last* ``@`` before that.
* A raw ``@`` in a password makes every driver read the rest of it as the host (or the
  path), so the masked span runs to the *last* ``@`` of the URL that cannot belong to
  what follows the host: an ``@`` in a query value (``?application_name=me@x``) is kept,
  any other later ``@`` is taken to end the userinfo. A database name holding an ``@``
  (rare) is masked with the password; percent-encode it (``%40``) to keep it visible.
* Query parameters that carry credentials (``?password=`` -- libpq and redis-py log in
  with it --, ``sslpassword``, ``aws_secret_access_key``, any key naming a password,
  secret, token or credential) have their value masked, and a query value that is itself
  a URL (``?endpoint_url=http://user:pw@host``) is masked by the same rules.

Backends import these helpers from here (never from :mod:`queue_core.storage.registry`, which is
part of the facade): the import contracts in ``pyproject.toml`` enforce it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

from queue_core.records.errors import ConfigError

__all__ = ["MASK", "check_sqlite_url", "mask_url", "redact", "redactions", "url_secrets"]

MASK = "***"
"""What a masked secret is shown as."""

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_SECRET_KEY = re.compile(r"pass|pwd|secret|token|credential|api_?key|auth", re.IGNORECASE)
"""Query keys whose value is a credential (``password``, ``sslpassword``,
``aws_secret_access_key``, ``aws_session_token``, ``auth_token``, ``api_key``...)."""
_PIECE_SPLIT = re.compile(r"[@/?#:&=;,\[\]]")
_MIN_PIECE = 3
"""A piece of a password shorter than this is not scrubbed on its own from free text
(:func:`redact`): replacing every ``"ab"`` would garble the message it sits in."""


def _query_value_at(before: str) -> bool:
    """Whether an ``@`` preceded by ``before`` (the text after ``scheme://``) sits inside a
    query value (``?key=va@lue``), where it cannot end a userinfo."""
    q = before.find("?")
    if q < 0:
        return False
    segment = re.split(r"[?&]", before[q:])[-1]
    return "=" in segment


def _password_span(url: str) -> tuple[int, int] | None:
    """``(start, end)`` of the password in ``url`` (``end`` is its closing ``@``), or
    ``None`` when no driver would read a password from the userinfo."""
    scheme = _SCHEME.match(url)
    if scheme is None:
        return None
    base = scheme.end()
    rest = url[base:]
    if rest.startswith("/"):  # no authority: sqlite:///path, postgresql:///db?host=...
        return None
    end = -1
    for at in re.finditer("@", rest):
        if not _query_value_at(rest[: at.start()]):
            end = at.start()
    if end < 0:
        return None
    user, colon, _ = rest[:end].partition(":")
    if not colon or "/" in user:  # no password; or "/" ended the authority before it
        return None
    return base + len(user) + 1, base + end


def _query_spans(url: str, start: int) -> list[tuple[int, int, str | None]]:
    """Spans of credential values in the query that begins after ``start``: ``(begin,
    end, None)`` to mask whole, or ``(begin, end, masked)`` for a nested URL."""
    q = url.find("?", start)
    if q < 0:
        return []
    spans: list[tuple[int, int, str | None]] = []
    pos = q + 1
    for item in url[q + 1 :].split("&"):
        key, eq, value = item.partition("=")
        if eq and value:
            begin = pos + len(key) + 1
            if _SECRET_KEY.search(unquote_plus(key)):
                spans.append((begin, begin + len(value), None))
            else:
                plain = unquote_plus(value)
                nested = mask_url(plain) if "://" in plain else plain
                if nested != plain:
                    spans.append((begin, begin + len(value), nested))
        pos += len(item) + 1
    return spans


def mask_url(url: str) -> str:
    """Return ``url`` with every credential replaced by ``***``, for logs, reprs and errors.

    Example:
        >>> mask_url("redis://user:secret@localhost:6379/0")
        'redis://user:***@localhost:6379/0'
        >>> mask_url("postgresql://app:pa@ss/w#rd@db/jobs?password=other")
        'postgresql://app:***@db/jobs?password=***'
        >>> mask_url("sqlite:///jobs.db")
        'sqlite:///jobs.db'

    Args:
        url: Any URL. Nothing is validated, so a URL that a driver would refuse (a bad
            port, say) is masked all the same; text that is not ``scheme://...`` is
            returned unchanged.

    Returns:
        The URL unchanged when it holds no credential, the masked URL otherwise. An empty
        password is shown as ``***`` too, as SQLAlchemy does.
    """
    span = _password_span(url)
    out = url
    after = 0
    if span is not None:
        out = url[: span[0]] + MASK + url[span[1] :]
        after = span[0] + len(MASK)
    elif _SCHEME.match(url) is None:
        return url
    pieces: list[str] = []
    last = 0
    for begin, end, nested in _query_spans(out, after):
        pieces += [out[last:begin], MASK if nested is None else nested]
        last = end
    return "".join(pieces) + out[last:] if pieces else out


def url_secrets(url: str) -> list[str]:
    """Every credential in ``url`` as text that a driver's message could quote: the
    password and each credential query value, as written and percent-decoded, and their
    pieces between reserved characters of at least three characters (a driver may quote
    the part of a badly encoded password that it took for a host, port or database).
    Longest first, so that replacing them in order leaves no fragment of a longer one."""
    raw: list[str] = []
    span = _password_span(url)
    if span is not None:
        raw.append(url[span[0] : span[1]])
    for begin, end, nested in _query_spans(url, span[1] if span else 0):
        if nested is None:
            raw.append(url[begin:end])
        else:
            raw += url_secrets(unquote_plus(url[begin:end]))
    found: set[str] = set()
    for secret in raw:
        for text in (secret, unquote_plus(secret), secret.replace("+", " ")):
            found.add(text)
            found.update(p for p in _PIECE_SPLIT.split(text) if len(p) >= _MIN_PIECE)
    found.discard("")
    return sorted(found, key=lambda s: (-len(s), s))


def _tails(url: str) -> list[str]:
    """The parts of the password after each reserved character, followed by ``@``: what a
    driver that ended the password early quotes as the start of the host
    (``postgresql://u:pa@ss@db`` -> host ``ss@db``)."""
    span = _password_span(url)
    if span is None:
        return []
    tails: set[str] = set()
    for password in (url[span[0] : span[1]], unquote_plus(url[span[0] : span[1]])):
        tails.update(password[m.end() :] + "@" for m in _PIECE_SPLIT.finditer(password))
    return sorted(tails - {"@"}, key=lambda s: (-len(s), s))


def redactions(url: str) -> list[tuple[str, str]]:
    """The ``(text, replacement)`` pairs :func:`redact` applies for ``url``, in order (for
    callers that redact many texts with one URL, such as a log formatter)."""
    pairs: list[tuple[str, str]] = []
    masked = mask_url(url)
    if masked != url:
        pairs.append((url, masked))
    pairs += [(tail, MASK + "@") for tail in _tails(url)]
    pairs += [(secret, MASK) for secret in url_secrets(url)]
    return pairs


def redact(text: str, url: str | None) -> str:
    """``text`` with ``url`` shown masked and every credential of it (see
    :func:`url_secrets`) replaced by ``***``: for messages that may quote the URL or a
    piece of its password (driver errors, CLI and dashboard error text, log lines)."""
    if not url:
        return text
    for old, new in redactions(url):
        text = text.replace(old, new)
    return text


_SQLITE_SCHEME = re.compile(r"^sqlite(\+[A-Za-z0-9_]+)?$", re.IGNORECASE)


def check_sqlite_url(url: str) -> None:
    """Refuse a SQLite URL that names no file (SPEC §10): it would open a private
    in-memory database that every other process (a worker, the CLI) sees empty, so
    every job enqueued on it is lost.

    Refused: ``sqlite://`` (no path), ``sqlite://queue.db`` (two slashes: ``queue.db``
    is read as a host and the database is in memory), ``sqlite:///:memory:``, a bare
    ``:memory:`` and a path that ends with ``/`` (``sqlite:////``: a directory).
    ``sqlite:///queue.db`` (relative) and ``sqlite:////abs/queue.db`` name
    a file; ``memory://`` is the in-process queue; with ``?uri=true`` the SQLite URI
    options are the driver's to judge, except an in-memory one (``file::memory:``,
    ``mode=memory``), refused as ``:memory:`` is.

    Raises:
        ConfigError: code ``invalid_url``, showing the three-slash form
            (``sqlite:///queue.db``).
    """
    text = url.strip()
    hint = ""
    lost = (
        "it would open a private in-memory database, whose jobs no worker sees and which "
        "are lost when this process ends"
    )
    if text.lower() == ":memory:":
        why = "':memory:' is not a storage URL"
    else:
        scheme, sep, rest = text.partition("://")
        if not sep or not _SQLITE_SCHEME.match(scheme):
            return
        where, qmark, query = rest.partition("?")
        host, slash, path = where.partition("/")
        if "uri=true" in query.lower():
            if ":memory:" not in where and "mode=memory" not in query.lower():
                return
            why = "it names a SQLite URI of an in-memory database"
        elif ":memory:" in where:
            why = "':memory:' is a private in-memory database"
        elif host and not path:
            why = "with two slashes the name is read as a host, not a file"
            if "@" not in host:  # never echo credentials
                why = f"with two slashes {host!r} is read as a host name, not a file"
                hint = f"; did you mean {scheme}:///{host}{qmark}{query} (three slashes)?"
        elif not slash or not path:
            why = "it has no path after the slashes"
        elif path.endswith("/"):
            why = f"its path {path!r} ends with '/': a directory, not a file"
            lost = "SQLite cannot open a directory"
        else:
            return
    raise ConfigError(
        f"storage URL {mask_url(url)!r} names no file ({why}): {lost}. A SQLite file "
        "takes three slashes: sqlite:///queue.db (relative to "
        f"the working directory) or sqlite:////abs/path/queue.db; memory:// is the "
        f"in-process queue{hint}",
        code="invalid_url",
        field="url",
        value=mask_url(url),
    )
