"""``python -m queue_core``: the ``queue-core`` command line.

For an environment whose scripts directory is not on the ``PATH``. The core does not
import the command line (``contrib.cli``, a layer above it): it runs whatever the
installed distribution registers as the ``queue-core`` console script.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points


def main() -> None:
    """Run the registered ``queue-core`` console script, or say why it cannot."""
    found = entry_points(group="console_scripts", name="queue-core")
    if not found:
        sys.exit(
            "error: no 'queue-core' command is installed in this environment "
            "(install queue-core, e.g. `pip install -e .`, then run `python -m queue_core`)"
        )
    next(iter(found)).load()()


if __name__ == "__main__":
    main()
