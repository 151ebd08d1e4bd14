"""The Vertex AI fake: CustomJobs (REST v1) that really run, and their Cloud Logging entries.

The official ``aiplatform_v1`` clients (sync ``rest`` and ``rest_asyncio``) talk to it; GCS is
gcp-storage-emulator. Each job runs through :mod:`cloud.runner`. Where each part lives:

* :mod:`~cloud.vertex.server`: the service, its settings and entry points ``serve`` (the
  stack's and tests'), ``stack_env`` and ``main`` (``python -m cloud.vertex``); its docstring
  lists the routes, how a job runs, faults and settings;
* :mod:`~cloud.vertex.jobs` (CustomJob routes) and :mod:`~cloud.vertex.logs` (log routes);
* :mod:`~cloud.vertex.lifecycle`: a job's life on its own thread; :mod:`~cloud.vertex.gcs`:
  the ``/gcs/<bucket>`` copies;
* :mod:`~cloud.vertex.state`: settings, the job store and its bookkeeping;
* :mod:`~cloud.vertex.api` (Google's error, enum and field shapes) and
  :mod:`~cloud.vertex.filters` (AIP-160 filters);
* :mod:`~cloud.vertex.validation` and :mod:`~cloud.vertex.catalog` (machine types): refusals.
"""

from cloud.vertex.server import (
    VertexService,
    main,
    serve,
    settings_from_env,
    stack_env,
    validate_custom_job,
)

__all__ = [
    "VertexService",
    "main",
    "serve",
    "settings_from_env",
    "stack_env",
    "validate_custom_job",
]
