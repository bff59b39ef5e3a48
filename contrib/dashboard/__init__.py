"""The queue-core web dashboard (``pip install queue-core[dashboard]``).

::

    from contrib.dashboard import create_app

    app = create_app(queue, token="s3cret")      # an ASGI app: serve it or mount it

or from the command line: ``queue-core dashboard --app myapp.tasks:queue``. See
docs/guides/dashboard.md.
"""

from contrib.dashboard.app import create_app

__all__ = ["create_app"]
