"""Storage: the :class:`~queue_core.storage.protocol.Storage` protocol, every optional
ability (:mod:`~queue_core.storage.abilities`), the records flows exchange with storage,
the URL-scheme registry and URL helpers. Built on records and rules; backends build on it."""
