"""``python -m contrib.dashboard [--app APP | --url URL] [--host H] [--port P] ...``."""

from contrib.dashboard.cli import main

main()
