"""Backends: how a step's job is submitted, found, described, relayed and stopped.

This package holds what every backend shares; each service has a package of its own.

* ``base.py``: the ``StepBackend`` contract, ``JobRequest`` and ``JobStatus``;
* ``arguments.py``: the argument checks every service's rules are written with;
* ``naming.py``: job names per task instance and try, service-valid and idempotent;
* ``ratelimit.py`` and ``list_pages.py``: the shared List rate limit and the stop rule of a
  round's list pages;
* ``sagemaker/``, ``vertex/``, ``azureml/``, ``local/``: one package per service.

docs/write-a-backend.md says how to add one.
"""
