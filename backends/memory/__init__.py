"""``memory://``, the in-process reference backend: :class:`MemoryStorage`.

A store (:mod:`.store`: the lock, the clock, the jobs and their indexes) and one part per
capability built on it (:mod:`.jobs`, :mod:`.claiming`, :mod:`.finishing`,
:mod:`.reaping`, :mod:`.admin`, :mod:`.limits`, :mod:`.flows`, :mod:`.schedules`,
:mod:`.workers`, :mod:`.throughput`); :mod:`.storage` delegates each operation to its part.
"""

from __future__ import annotations

from backends.memory.storage import MemoryStorage

__all__ = ["MemoryStorage"]
