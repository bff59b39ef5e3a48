"""Storage backends, one module or package each, registered by URL scheme.

This package imports nothing on purpose: ``queue_core.storage.registry`` imports a backend only
when a URL with its scheme is opened.
"""
