"""The SageMaker fake: training jobs (AWS JSON 1.1) that really run, storage and logs in moto.

It answers CreateTrainingJob, DescribeTrainingJob, StopTrainingJob and ListTrainingJobs as boto3
and aiobotocore send them, and runs each job through :mod:`cloud.runner`. Where each part lives:

* :mod:`~cloud.sagemaker.server`: the service (dispatch, error shape) and its entry points
  ``serve`` (the stack's), ``start`` (tests) and ``main`` (``python -m cloud.sagemaker``);
  its docstring says what a job goes through and the known gaps;
* :mod:`~cloud.sagemaker.operations`: the four operations;
* :mod:`~cloud.sagemaker.lifecycle`: a job's life on its own thread;
* :mod:`~cloud.sagemaker.state`: settings, clients and the job store;
* :mod:`~cloud.sagemaker.storage` (S3 channels, outputs, checkpoints) and
  :mod:`~cloud.sagemaker.logs` (CloudWatch Logs), both in moto;
* :mod:`~cloud.sagemaker.validation`: what the service refuses; the instance types it accepts
  are in ``data/training_instance_types.txt``.
"""

from cloud.sagemaker.server import SageMakerFake, main, serve, start

__all__ = ["SageMakerFake", "main", "serve", "start"]
