"""The application's parts: tasks and their options, job handles, the serializer,
configuration, periodic declarations, flow files and flow steps. Built on storage, rules
and records; the worker runs what is declared here, the facade (:class:`~queue_core.Queue`)
ties it together."""
