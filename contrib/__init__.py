"""Things built on queue_core's public API: the CLI and integrations."""
