"""``python -m queue_core``: the ``queue-core`` command line (:mod:`contrib.cli`).

For an environment whose scripts directory is not on the ``PATH``. ``import queue_core``
never loads this module, so the package still never imports ``contrib``; only running
``python -m queue_core`` does.
"""

if __name__ == "__main__":
    from contrib.cli import main

    main()
