"""``python manage.py queue_core_worker``: a queue-core worker inside a Django project.

The ``Queue`` comes from ``--app MODULE:ATTR``, else the ``QUEUE_CORE_APP`` setting.
Options mirror ``queue-core worker``; unset ones follow the usual precedence (env, then
the configuration file, then the defaults).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from contrib.cli.app import CliUsageError, load_app
from queue_core import QueueCoreError

__all__ = ["Command"]


class Command(BaseCommand):  # type: ignore[misc]  # django ships no type stubs
    help = "Run a queue-core worker for the Queue named by --app or settings.QUEUE_CORE_APP."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--app",
            default=None,
            metavar="MODULE:ATTR",
            help="The Queue (default: settings.QUEUE_CORE_APP).",
        )
        parser.add_argument(
            "--queues", default=None, metavar="Q1,Q2", help="Comma-separated queue names."
        )
        parser.add_argument("--slots", type=int, default=None, help="Jobs run at once.")
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit once no job is running, ready or due within 60 s.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        spec = options.get("app") or getattr(settings, "QUEUE_CORE_APP", None)
        if not spec:
            raise CommandError(
                "no queue: set QUEUE_CORE_APP = 'myproject.tasks:queue' in settings, "
                "or pass --app MODULE:ATTR"
            )
        queues = options.get("queues")
        names = [q.strip() for q in queues.split(",") if q.strip()] if queues else None
        try:
            queue = load_app(spec)
            queue.run_worker(
                queues=names, slots=options.get("slots"), burst=bool(options.get("burst"))
            )
        except (CliUsageError, QueueCoreError) as exc:
            raise CommandError(str(exc)) from exc
