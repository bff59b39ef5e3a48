"""The Django app config of ``contrib.django``."""

from __future__ import annotations

from django.apps import AppConfig


class QueueCoreConfig(AppConfig):  # type: ignore[misc]  # django ships no type stubs
    """``contrib.django``: provides the ``queue_core_worker`` management command."""

    name = "contrib.django"
    label = "queue_core"
    verbose_name = "queue-core"
