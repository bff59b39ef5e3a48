"""``shelf://``: an example queue-core storage backend keeping every job in one JSON file.

See ``README.md`` beside this package and docs/writing-a-backend.md in queue-core.
"""

from shelf_queue.storage import ShelfStorage

__all__ = ["ShelfStorage"]
