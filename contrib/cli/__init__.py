"""The ``queue-core`` command line (SPEC §9).

Built on the public API of :mod:`queue_core` only: a :class:`~queue_core.Queue` built
from ``--app`` / ``--url`` / ``QUEUE_CORE_URL`` / the embedded default, never a backend
module. ``main()`` is the console-script entry point; ``cli`` is the click group (drive
it with :class:`click.testing.CliRunner`).
"""

from contrib.cli.commands import cli, main

__all__ = ["cli", "main"]
