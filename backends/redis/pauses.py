"""Pauses of the Redis backend (``SupportsPause``): what is paused, and the jobs moved aside.

A pause is a field of the hash ``P:paused`` (``<kind>:<name>`` -> since, epoch ms),
written with ``HSETNX`` (a second pause keeps the first ``since``). The scripts that
claim or count ready jobs read it inline (``lua/_paused.lua``: one ``HLEN`` while
nothing is paused, so a claim that meets no pause costs what it did):

* a paused queue's ready sets are not read by ``claim.lua`` and ``next_ready.lua``, and
  ``count_pending.lua`` counts only its running jobs;
* a job of a paused task or flow that ``claim.lua`` meets is moved aside once, to the
  zset ``P:held:<kind>:<name>`` (same score and member as in its ready set), and
  ``resume.lua`` puts it back in its order.

The rule the scripts mirror is :func:`queue_core.rules.control.paused`. Every claim reads
the stored pauses, so a pause holds for every worker as soon as :meth:`RedisPauses.pause`
returns.

On a Redis Cluster (``backends/redis/homes.py``) the pauses live in the shared home. A
script running in a queue's home (another slot) cannot read them, so the client reads
them first, with the pause version ``{P}:pv`` (one pipelined round trip per claim,
``next_ready`` or ``count_pending`` call that visits a queue's home: :func:`pause_arg`),
and passes them as the script's last argument (``lua/_paused_argv.lua``). Jobs moved
aside stay in their home's ``P:held:<field>``; :meth:`RedisPauses.resume` removes the
pause in the shared home (moving the version) and then sweeps every queue's home, which
keeps the version as ``P:rv``: a claim that read the pauses before the resume moves
nothing aside after the sweep (it sees ``P:rv`` past the version it read).
"""

from __future__ import annotations

from typing import Any

from backends.redis.errors import translate_errors
from backends.redis.store import RedisStore
from queue_core.records.control import Pause, PauseKind
from queue_core.records.jobs import dt_from_ms
from queue_core.rules.control import pause_kind

__all__ = ["RedisPauses", "pause_arg"]


class RedisPauses:
    """:class:`~queue_core.storage.control.SupportsPause` of one store."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.key = f"{store.key_prefix}:paused"
        self._resume = store.script("resume")

    def pause(self, kind: PauseKind, name: str, now: int | None) -> bool:
        """``SupportsPause.pause``: ``HSETNX`` of the pause's field."""
        field = _field(kind, name)
        t = self.store.now(now)
        with translate_errors("pause"):
            added = bool(self.store.client.hsetnx(self.key, field, t))
            if added and self.store.cluster:
                self.store.client.incr(_version(self.store))
        return added

    def resume(self, kind: PauseKind, name: str) -> bool:
        """``SupportsPause.resume``: one ``resume.lua`` call."""
        field = _field(kind, name)
        args = self.store.args(None)
        args.append(field)
        with translate_errors("resume"):
            version = self.store.call(self._resume, args)
            if version and self.store.cluster:
                for home in self.store.homes.all()[1:]:
                    self.store.call(self._resume, [*self.store.args(None, home), field, version])
        return bool(version)

    def list_paused(self) -> list[Pause]:
        """``SupportsPause.list_paused``: the hash, sorted by kind then name."""
        self.store.args(None)  # refused once closed
        with translate_errors("list_paused"):
            stored = self.store.client.hgetall(self.key)
        out: list[Pause] = []
        for field, since in stored.items():
            kind, _, name = field.decode().partition(":")
            at = dt_from_ms(int(since))
            assert at is not None
            out.append(Pause(kind=PauseKind(kind), name=name, since=at))
        out.sort(key=lambda p: (p.kind.value, p.name))
        return out


def pause_arg(store: RedisStore, home: str, op: str = "claim") -> str:
    """On a Redis Cluster, the last argument of a script that reads the pauses
    (``lua/_paused_argv.lua``) when it runs in ``home``: ``'*'`` in the shared home (the
    script reads them there), else the pause version and the pauses' fields, read from
    the shared home in one round trip and joined by newlines (a failure is reported as
    ``op``'s)."""
    if home == store.homes.shared:
        return "*"
    with translate_errors(op):
        pipe: Any = store.client.pipeline(transaction=False)
        pipe.get(_version(store))  # first: a resume between the two reads moves it
        pipe.hkeys(f"{store.key_prefix}:paused")
        version, fields = pipe.execute()
    return "\n".join([(version or b"0").decode(), *(f.decode() for f in fields)])


def _version(store: RedisStore) -> str:
    """The pause version of a cluster: moved by every pause and resume (``resume.lua``)."""
    return f"{store.key_prefix}:pv"


def _field(kind: PauseKind | str, name: str) -> str:
    """The pause's field of ``P:paused``; a ``ConfigError`` for a kind that is none."""
    return f"{pause_kind(kind).value}:{name}"
