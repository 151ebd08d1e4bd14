"""The Azure ML fake: ARM REST as ``MLClient`` sends it; command jobs that really run.

Workspace, datastores, computes, environments and jobs over http and https on one port, run
history and log files for ``MLClient.jobs.stream``, an MLflow tracking server; storage is
Azurite. Each job runs through :mod:`cloud.runner`. Where each part lives:

* :mod:`~cloud.azureml.server`: the service, its settings and entry points ``serve`` (the
  stack's and tests'), ``cloud_metadata``, ``stack_env`` and ``main`` (``python -m
  cloud.azureml``); its docstring lists the routes, how a job runs, faults and settings;
* :mod:`~cloud.azureml.workspace` (workspace, discovery, datastores, computes),
  :mod:`~cloud.azureml.jobs`, :mod:`~cloud.azureml.environments` and
  :mod:`~cloud.azureml.history` (run details, log files): the routes;
* :mod:`~cloud.azureml.lifecycle`: a job's life on its own thread;
* :mod:`~cloud.azureml.state`: settings, stored jobs and environments;
* :mod:`~cloud.azureml.storage`: inputs and outputs in Azurite;
* :mod:`~cloud.azureml.mlflow_tracking`: the MLflow tracking server (each job is a run);
* :mod:`~cloud.azureml.arm` (ARM paths and error bodies), :mod:`~cloud.azureml.validation` and
  :mod:`~cloud.azureml.catalog` (VM sizes): refusals.
"""

from cloud.azureml.server import (
    RESOURCE_GROUP,
    SUBSCRIPTION,
    WORKSPACE,
    AzureMLService,
    cloud_metadata,
    main,
    serve,
    settings_from_env,
    stack_env,
    tls_dir_for,
)

__all__ = [
    "RESOURCE_GROUP",
    "SUBSCRIPTION",
    "WORKSPACE",
    "AzureMLService",
    "cloud_metadata",
    "main",
    "serve",
    "settings_from_env",
    "stack_env",
    "tls_dir_for",
]
