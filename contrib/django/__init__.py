"""Django integration: add ``"contrib.django"`` to ``INSTALLED_APPS`` and set
``QUEUE_CORE_APP = "myproject.tasks:queue"`` (the ``Queue`` your tasks are declared on);
then ``python manage.py queue_core_worker [--queues q1,q2] [--slots N] [--burst]`` runs a
worker with Django set up, so task bodies can use the ORM.

See docs/guides/frameworks.md.
"""
