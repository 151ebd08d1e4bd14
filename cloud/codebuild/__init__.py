"""An AWS CodeBuild fake whose builds really run, on this host, against the stack's engine.

It speaks the AWS JSON 1.1 protocol as boto3 sends it (``POST /``, ``X-Amz-Target:
CodeBuild_20161006.<Operation>``) and answers CreateProject, BatchGetProjects, ListProjects,
StartBuild, BatchGetBuilds, StopBuild and ListBuildsForProject, each counted under its name.
Moto has a CodeBuild mock that never runs a build, hence this fake; S3, IAM and CloudWatch Logs
stay in moto (``STEPOP_MOTO_ENDPOINT``).

What a call goes through, as on the real service:

* refusals (HTTP 400, ``__type``): every constraint of the input shapes of botocore's
  ``codebuild`` model (``InvalidInputException``, AWS's ``1 validation error detected``
  wording); a ``serviceRole`` moto's IAM does not hold (``InvalidInputException: CodeBuild is
  not authorized to perform: sts:AssumeRole on <arn>``, at CreateProject and at StartBuild); a
  project name taken (``ResourceAlreadyExistsException``); StartBuild of an unknown project
  (``ResourceNotFoundException``); an ``idempotencyToken`` used in the last 5 minutes with other
  parameters (``InvalidInputException``; with the same ones the SAME build is answered, no
  second one starts); the project's ``concurrentBuildLimit`` reached, or more builds in progress
  than the account's queue holds (``AccountLimitExceededException``); S3 source without a
  location, NO_SOURCE without a buildspec, variables named ``CODEBUILD_*``.
* a build (:mod:`~cloud.codebuild.lifecycle`): SUBMITTED, QUEUED, PROVISIONING,
  DOWNLOAD_SOURCE, INSTALL, PRE_BUILD, BUILD, POST_BUILD, UPLOAD_ARTIFACTS, FINALIZING,
  COMPLETED, with ``buildStatus`` IN_PROGRESS -> SUCCEEDED | FAILED | FAULT | TIMED_OUT |
  STOPPED and each phase's status, duration and contexts. Its source is S3 (a zip object or a
  folder prefix ending with ``/``, :mod:`~cloud.codebuild.source`) or NO_SOURCE; its buildspec
  (:mod:`~cloud.codebuild.buildspec`) is ``buildspecOverride``, the project's, or
  ``buildspec.yml`` in the source; its commands run with bash on this host
  (:mod:`~cloud.codebuild.commands`: environment, shell state, privileged mode). A missing S3
  object fails DOWNLOAD_SOURCE with ``CLIENT_ERROR``, a bad buildspec with ``YAML_FILE_ERROR``, a
  failing command its phase with ``COMMAND_EXECUTION_ERROR``. ``timeoutInMinutes`` ends it as
  TIMED_OUT; StopBuild sends the running command's process group SIGTERM, then SIGKILL.
* logs (:mod:`~cloud.codebuild.logs`): every line, the agent's own (``[Container] 2026/11/29
  10:00:00.000000 Entering phase BUILD``, ``Running command ...``) and the commands' output, in
  CloudWatch Logs (moto) while the build runs: group ``/aws/codebuild/<project>`` and stream
  ``<build uuid>``, or the logs config's group and ``<streamName>/<build uuid>``.

Known gaps: the build image is not used (commands run on this host, with its ``docker``,
``bash`` and tools; nothing of the image's); sources other than S3 and NO_SOURCE fail
DOWNLOAD_SOURCE; artifacts, caches, reports, batch builds, VPC, secondary sources, S3 logs and
PARAMETER_STORE / SECRETS_MANAGER variables are not emulated (the latter fail DOWNLOAD_SOURCE);
``queuedTimeoutInMinutes`` is reported, not enforced; no ``runtime-versions``.

Control API (``/_fake/...``, :mod:`cloud.fake_http`, client :class:`cloud.control.FakeControl`):
counters, reset (``{"jobs": true}`` stops running builds and forgets them; projects stay),
``/_fake/page_size`` (ids in one ListBuildsForProject / ListProjects page, 100 until set) and
these fault rules:

``{"kind": "throttle", "operation": "StartBuild"}``
    ``ThrottlingException`` "Rate exceeded" (HTTP 400).
``{"kind": "error", "status": 500|503}``
    ``InternalFailure`` / ``ServiceUnavailableException``.
``{"kind": "job_failure", "reason": "...", "match": "<substring>", "code": "..."}``
    a failed build: the next build whose id, source location, buildspec or a variable value
    contains ``match`` (any build without one) fails its BUILD phase with ``reason`` (context
    ``code``, default COMMAND_EXECUTION_ERROR) without running its commands; POST_BUILD still
    runs. Once, unless ``count`` says otherwise.
``{"kind": "provisioning_delay", "seconds": 5}``
    a slow build: builds stay in PROVISIONING that much longer, while the rule stands.
``{"kind": "log_delay", "seconds": 2}``
    log lines reach CloudWatch that much later, while the rule stands.

Settings: :class:`~cloud.codebuild.state.CodeBuildState` (concurrency, queue limit, the length
of a minute for timeouts, the stop grace). Where each part lives: :mod:`~cloud.codebuild.server`
(dispatch, errors, ``serve``/``start``/``stack_env``/``main``), :mod:`~cloud.codebuild.operations`,
:mod:`~cloud.codebuild.lifecycle`, :mod:`~cloud.codebuild.commands`,
:mod:`~cloud.codebuild.state`, :mod:`~cloud.codebuild.validation`.
"""

from cloud.codebuild.server import CodeBuildFake, main, serve, stack_env, start

__all__ = ["CodeBuildFake", "main", "serve", "stack_env", "start"]
