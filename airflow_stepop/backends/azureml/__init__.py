"""Azure ML: a step runs as an Azure ML command job.

What it needs: the ``azure_ml`` connection (``hooks/azureml.py``: workspace, credentials), an
artifact root in Blob Storage or an Azure ML datastore, and either a container registry for
built environment images or Azure ML's own image build (``[stepop] azureml_image_build``).
docs/azureml.md lists the roles.

Where its pieces are:

* ``backend.py``: ``AzureMLBackend``, the REST calls (through ``hooks/azureml_rest.py``);
* ``triggerer_calls.py``: its async calls in the triggerer (states, log files, cancel);
* ``config.py``: the operator's argument rules, checked at parse time;
* ``compute.py``: a named compute cluster, checked against the step before the submit;
* ``roots.py``: artifact roots (Blob Storage URLs, datastore paths) and their accounts;
* ``launch.py``: the job body, its inputs and outputs, and what its states mean;
* ``image.py``: the job's environment (prebuilt, built on the worker, or built by Azure ML);
* ``logs.py``: the job's user log files, read at a bounded rate;
* ``errors.py``: the error of a request refused before any API call;
* ``entry.py``: the job's entry point (standard library only; it runs inside the job);
* ``catalog.csv``: VM sizes, hardware and dated prices (dedicated and low-priority).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_stepop.backends import lazy_backend

if TYPE_CHECKING:
    from airflow_stepop.backends.azureml.backend import AzureMLBackend

__all__ = ["AzureMLBackend"]
__getattr__ = lazy_backend(__name__, "AzureMLBackend")
