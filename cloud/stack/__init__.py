"""Start and stop the emulated clouds: ``python -m cloud.stack up|down|env|status|serve``.

``up`` starts every piece on a free loopback port (or fixed ports and another address: see
:data:`BIND`, :data:`HOST`, :data:`PORT_BASE`), waits until each answers, and writes the
endpoints to ``.cloud/env`` (KEY=VALUE lines). A stack whose ``.cloud/env`` still answers is
reused. ``down`` stops every process ``up`` started, by the PIDs kept under ``.cloud/pids``
(each piece runs in its own session, so its whole process group goes), every job process a fake
left (``.cloud/jobs/**/*.pid``) and every container labelled ``stepop.fake``. ``serve`` is
``up``, then waiting for SIGTERM, then ``down``: the command of a container.

Pieces:

* moto server: S3, ECR API, STS, IAM, CloudWatch Logs (``AWS_ENDPOINT_URL``);
* gcp-storage-emulator, in memory, with :mod:`cloud.gcs`'s form uploads and token endpoint
  (``STORAGE_EMULATOR_HOST``; ``AIRFLOW_CONN_GOOGLE_CLOUD_SIGNER``, the throwaway key that
  signs gs:// URLs for Kubernetes steps' pods);
* Azurite's blob service from npm, in memory (``AZURE_STORAGE_CONNECTION_STRING``), and
  :mod:`cloud.azure_dfs`'s ADLS Gen2 front before it (``STEPOP_ADLS_BLOB_ENDPOINT``,
  ``STEPOP_ADLS_CONNECTION_STRING``, ``AIRFLOW_CONN_ADLS_EMULATED``: directory SAS);
* the job-service fakes of :data:`FAKES`: SageMaker, Vertex AI, Azure ML, the image
  builders CodeBuild (``STEPOP_CODEBUILD_ENDPOINT``, ``AWS_ENDPOINT_URL_CODEBUILD``,
  ``service_config.codebuild`` of the AWS connection) and Cloud Build
  (``STEPOP_CLOUDBUILD_ENDPOINT``, the Google connection's ``cloudbuild_endpoint`` extra), and
  a Kubernetes API server (``STEPOP_KUBERNETES_ENDPOINT``; ``AIRFLOW_CONN_KUBERNETES_DEFAULT``
  with an inline kubeconfig, and the same kubeconfig as the file ``STEPOP_KUBECONFIG``).

Once every piece answers, ``up`` creates the bucket :data:`DEMO_BUCKET` in S3, in GCS and as an
Azure Blob container (``STEPOP_DEMO_BUCKET``), so the docs' "try it" blocks need no set-up of
their own, and a ready CodeBuild project :data:`CODEBUILD_PROJECT` with its IAM role
(``STEPOP_CODEBUILD_PROJECT``, ``STEPOP_CODEBUILD_ROLE_ARN``) for builds by hand.
The base image the docs name is pushed to the registry by ``scripts/engine.sh up`` (which
``make cloud-up`` runs first).

Adding a fake is one :class:`Fake` entry. Its module provides::

    def serve(host: str, port: int, env: dict[str, str]) -> None:
        '''Serve until SIGTERM/SIGINT, then stop every job it runs.'''

and optionally::

    def stack_env(url: str, env: dict[str, str]) -> dict[str, str]:
        '''Extra .cloud/env lines (e.g. an AIRFLOW_CONN_* value) given the fake's URL.'''

``env`` is what the stack wrote so far (storage endpoints, registry, ``STEPOP_CLOUD_DIR``).
A fake whose module does not exist yet, or has no ``serve``, is skipped.

Where each part lives: :mod:`~cloud.stack.commands` (``up``, ``down``, ``status``, ``serve``,
the command line), :mod:`~cloud.stack.settings` (paths, addresses, ports, :data:`FAKES`),
:mod:`~cloud.stack.envfile` (``.cloud/env`` and the connections derived from it),
:mod:`~cloud.stack.processes` (starting, waiting for and stopping the pieces),
:mod:`~cloud.stack.buckets` (the demo bucket) and :mod:`~cloud.stack.projects` (the CodeBuild
project). Every name is importable from ``cloud.stack``.
"""

from cloud.stack.buckets import create_buckets
from cloud.stack.commands import down, health_urls, main, running, serve, status, up
from cloud.stack.envfile import aws_connection, derived, google_connection, read_env, write_env
from cloud.stack.processes import answers, azurite_bin, free_port
from cloud.stack.projects import create_build_project
from cloud.stack.settings import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    AZURITE_VERSION,
    BASE_IMAGE,
    BIND,
    CACHE,
    CODEBUILD_PROJECT,
    CODEBUILD_ROLE,
    DEMO_BUCKET,
    ENV_FILE,
    FAKES,
    HOST,
    PORT_BASE,
    REGION,
    REGISTRY,
    ROOT,
    START_TIMEOUT,
    STATE,
    Fake,
    log,
)

__all__ = [
    "AZURITE_ACCOUNT",
    "AZURITE_KEY",
    "AZURITE_VERSION",
    "BASE_IMAGE",
    "BIND",
    "CACHE",
    "CODEBUILD_PROJECT",
    "CODEBUILD_ROLE",
    "DEMO_BUCKET",
    "ENV_FILE",
    "FAKES",
    "HOST",
    "PORT_BASE",
    "REGION",
    "REGISTRY",
    "ROOT",
    "START_TIMEOUT",
    "STATE",
    "Fake",
    "answers",
    "aws_connection",
    "azurite_bin",
    "create_build_project",
    "create_buckets",
    "derived",
    "down",
    "free_port",
    "google_connection",
    "health_urls",
    "log",
    "main",
    "read_env",
    "running",
    "serve",
    "status",
    "up",
    "write_env",
]
