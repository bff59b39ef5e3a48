"""URL helpers for backends and the facade, beside the :mod:`~queue_core.storage` protocol.

A storage URL may carry credentials (``postgresql://user:secret@host/db``). Anything that
shows a URL -- a ``repr``, a log line, a :class:`~queue_core.errors.ConfigError` -- passes
it through :func:`mask_url` first, so a password never leaves the process in text.

Backends import these helpers from here (never from :mod:`queue_core.registry`, which is
part of the facade): the import contracts in ``pyproject.toml`` enforce it.
"""

from __future__ import annotations

import re

__all__ = ["mask_url"]

_USERINFO = re.compile(r"(?P<user>[^:/@?#\[\]]*):(?P<password>[^@]*)@")
"""``user:password@`` at the start of what follows ``scheme://``. The password runs to the
first ``@`` -- as SQLAlchemy reads it -- so an unencoded ``/``, ``#`` or ``?`` in it is
masked too (``urlsplit`` would end the authority there and leave the rest in the path)."""


def mask_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***``, for logs, reprs and errors.

    Example:
        >>> mask_url("redis://user:secret@localhost:6379/0")
        'redis://user:***@localhost:6379/0'
        >>> mask_url("postgresql://app:pa/ss#word@db/jobs")
        'postgresql://app:***@db/jobs'
        >>> mask_url("sqlite:///jobs.db")
        'sqlite:///jobs.db'

    Args:
        url: Any URL. Nothing is parsed beyond the credentials, so a URL that a driver
            would refuse (a bad port, say) is masked all the same.

    Returns:
        The URL unchanged when it has no password, the masked URL otherwise.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    found = _USERINFO.match(rest)
    if found is None:
        return url
    return f"{scheme}://{found.group('user')}:***@{rest[found.end() :]}"
