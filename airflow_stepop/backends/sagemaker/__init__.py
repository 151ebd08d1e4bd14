"""SageMaker: a step runs as a SageMaker training job.

What it needs: the amazon provider's AWS connection (``aws_conn_id``), an execution role
SageMaker assumes (``role_arn=`` or ``[stepop] sagemaker_role_arn``), an S3 artifact root, and
an ECR repository for built environment images. docs/sagemaker.md lists the IAM permissions.

Where its pieces are:

* ``backend.py``: ``SageMakerBackend``, SageMaker's API calls on the worker's side;
* ``triggerer_calls.py``: those on the triggerer's (states, log lines, stop);
* ``config.py``: the operator's argument rules, checked at parse time, and ``[stepop]`` defaults;
* ``launch.py``: the job request's channels, launch document and environment;
* ``job.py``: what SageMaker's answers mean (states, errors, links, cost);
* ``logs.py``: log lines from CloudWatch Logs within a call budget;
* ``image.py``: which images SageMaker can pull, and the image a step's job runs;
* ``clients.py``: the provider's hooks and their async clients;
* ``entry.py``: the job's entry point (standard library only; it runs inside the job);
* ``catalog.csv``: training instance types, hardware and dated prices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_stepop.backends import lazy_backend

if TYPE_CHECKING:
    from airflow_stepop.backends.sagemaker.backend import SageMakerBackend

__all__ = ["SageMakerBackend"]
__getattr__ = lazy_backend(__name__, "SageMakerBackend")
