"""URL helpers for backends and the facade, beside the :mod:`~queue_core.storage` protocol.

A storage URL may carry credentials (``postgresql://user:secret@host/db``). Anything that
shows a URL -- a ``repr``, a log line, a :class:`~queue_core.errors.ConfigError` -- passes
it through :func:`mask_url` first, so a password never leaves the process in text.

Backends import these helpers from here (never from :mod:`queue_core.registry`, which is
part of the facade): the import contracts in ``pyproject.toml`` enforce it.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["mask_url"]


def mask_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***``, for logs, reprs and errors.

    Example:
        >>> mask_url("redis://user:secret@localhost:6379/0")
        'redis://user:***@localhost:6379/0'
        >>> mask_url("sqlite:///jobs.db")
        'sqlite:///jobs.db'

    Args:
        url: Any URL; one that cannot be parsed is replaced as a whole.

    Returns:
        The URL unchanged when it has no password, the masked URL otherwise, or
        ``"<unparseable url>"``.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
        port = parts.port
    except ValueError:
        return "<unparseable url>"
    if password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal: urlsplit dropped its brackets
        host = f"[{host}]"
    if port is not None:
        host = f"{host}:{port}"
    netloc = f"{user}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
