"""A Google Cloud Build fake whose builds really run ``docker`` on this host, against the
stack's engine, and push to its registry.

It speaks REST v1 as ``google-cloud-build``'s REST transport sends it (``CloudBuildClient(
transport="rest", client_options={"api_endpoint": <url>})``, anonymous credentials), each call
counted under its name:

``POST /v1/projects/{p}/builds``, ``POST /v1/projects/{p}/locations/{l}/builds``  CreateBuild
    answers a google.longrunning Operation whose metadata is a BuildOperationMetadata holding
    the build (QUEUED); the ``global`` location, or the one ``parent`` names
``GET  .../builds/{id}``                      GetBuild
``POST .../builds/{id}:cancel``               CancelBuild (CANCELLED at once; the running
                                              command gets SIGTERM, then SIGKILL)
``GET  .../builds``                           ListBuilds: newest first, ``pageSize``/
                                              ``pageToken``, ``filter`` (:mod:`~cloud.
                                              cloudbuild.filters`: ``tags="x"``,
                                              ``status="WORKING"``, AND/OR/NOT...)
``GET  /v1/operations/build/{p}/{op}``, ``GET /v1/projects/{p}/locations/{l}/operations/{op}``
    GetOperation: done once the build is; its ``response`` is the Build, or its ``error``
    ``Build failed; check build logs for details`` (code 2; 4 for TIMEOUT, 1 for CANCELLED)
``GET  /_fake/logs/{build id}``               the build's log as text, whatever its logging

Requests are parsed with the client library's own ``Build`` message (an unknown field or a
malformed duration is refused) and answers rendered from it, enums as numbers when the client
asks for them (``$alt=json;enum-encoding=int``). Refusals (400 INVALID_ARGUMENT, ``invalid
build: ...``): :mod:`~cloud.cloudbuild.validation` (no steps, a step without name, a malformed
``logsBucket``, an unknown ``options.logging``, a ``timeout`` outside (0, 24h], bad tags,
substitutions that do not match), and a ``logsBucket`` the GCS emulator does not hold.

A build (:mod:`~cloud.cloudbuild.lifecycle`): QUEUED -> WORKING -> SUCCESS | FAILURE |
INTERNAL_ERROR | TIMEOUT | CANCELLED, with ``statusDetail``, ``failureInfo`` {type
USER_BUILD_STEP, PUSH_IMAGE_NOT_FOUND, PUSH_FAILED, FETCH_SOURCE_FAILED; detail},
``results.images`` {name, digest, pushTiming}, ``createTime``/``startTime``/``finishTime``,
``timing`` (FETCHSOURCE, BUILD, PUSH), each step's ``status``, ``timing`` and ``exitCode``,
``logUrl``, ``sourceProvenance``. Its source is ``source.storageSource`` {bucket, object} in the
GCS emulator (``STORAGE_EMULATOR_HOST``), a gzipped tarball or a zip, extracted into its
workspace (``/workspace``); its steps run in order (``waitFor`` is checked, not parallel);
substitutions (``$PROJECT_ID``, ``$BUILD_ID``, ``$LOCATION``, ``$PROJECT_NUMBER``, user
``$_X``/``${_X}``, ``$$``) apply to steps and images; ``images`` are pushed after the steps.

Logs (:mod:`~cloud.cloudbuild.logs`): with a ``logsBucket`` (``gs://bucket[/prefix]``) and
``options.logging`` LEGACY, GCS_ONLY or unspecified, the log is
``gs://bucket[/prefix]/log-<build id>.txt``, uploaded again at most every half second while it
has new lines and at the end, with Cloud Build's prefixes (``Step #0: ...``).

Known gaps: only the ``gcr.io/cloud-builders/docker`` builder runs (a step of another builder
fails, saying so); steps run on this host, not in the builder's container; no secrets,
volumes, artifacts, triggers, worker pools, approvals, ``queueTtl`` expiry, or parallel steps;
without a ``logsBucket`` nothing is written to GCS (the service would use its default bucket);
``logUrl`` points at the console.

Control API (``/_fake/...``, :mod:`cloud.fake_http`, client :class:`cloud.control.FakeControl`):
counters, ``/_fake/page_size``, reset (``{"jobs": true}`` cancels running builds and forgets
every build) and these fault rules:

``{"kind": "throttle", "operation": "CreateBuild"}``  429 RESOURCE_EXHAUSTED.
``{"kind": "error", "status": 500|503}``             INTERNAL / UNAVAILABLE.
``{"kind": "job_failure", "reason": "...", "match": "<substring>"}``
    a failed build: the next build whose id, source (``gs://bucket/object``), an image, a tag
    or a step argument contains ``match`` (any build without one) fails in its first step with
    ``reason`` (``failureInfo`` USER_BUILD_STEP), running nothing. Once, unless ``count`` says
    otherwise.
``{"kind": "provisioning_delay", "seconds": 5}``
    a slow build: builds stay QUEUED that much longer, while the rule stands.
``{"kind": "log_delay", "seconds": 2}``
    log lines reach the GCS object that much later, while the rule stands.

Settings: :class:`~cloud.cloudbuild.state.CloudBuildState`. Where each part lives:
:mod:`~cloud.cloudbuild.server` (errors, reset, ``serve``/``start``/``stack_env``/``main``),
:mod:`~cloud.cloudbuild.routes`, :mod:`~cloud.cloudbuild.api`, :mod:`~cloud.cloudbuild.source`.
"""

from cloud.cloudbuild.server import CloudBuildFake, main, serve, stack_env, start

__all__ = ["CloudBuildFake", "main", "serve", "stack_env", "start"]
