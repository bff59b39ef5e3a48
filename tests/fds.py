"""Descriptors past ``select()``'s limit: a long-lived process (a worker, a test session)
can hold more than 1,024 open files, and every wait on a descriptor must still work."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

SELECT_LIMIT = 1024


@contextmanager
def descriptors_past_select_limit() -> Iterator[None]:
    """Hold the low descriptor numbers open, so every file, pipe or socket opened inside
    gets a number past :data:`SELECT_LIMIT`."""
    held: list[int] = []
    try:
        while not held or held[-1] <= SELECT_LIMIT + 8:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in held:
            os.close(fd)
