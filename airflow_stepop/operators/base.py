"""BaseStepOperator: ship one callable to a job, defer while it runs, return references.

A service's operator is a thin subclass that says which backend runs the job. The life of a
step (packaging, inputs, the spec, submit, deferral, kills, results and failures) is driven from
here; its parts live beside it: the argument checks (``arguments``, ``unknown_arguments``),
what the job reads (``job_request``), what an earlier try left (``earlier_try``), how the task
waits for its job (``job_wait``) and what a finished job left (``outcome``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from airflow_stepop import config

# Registers ArtifactRef with Airflow's XCom deserializer in every process that parses a DAG of
# steps: a plain task downstream of a step reads its reference in its own process.
from airflow_stepop.artifacts import ref as _xcom_registration  # noqa: F401
from airflow_stepop.backends import arguments as check
from airflow_stepop.backends.naming import shown_job
from airflow_stepop.operators.arguments import (
    check_cache_arguments,
    check_call_arguments,
    check_capacity_arguments,
    check_connection,
    check_default_args,
    check_step_arguments,
    refuse_empty_renders,
    rename_step_resources,
    rendered_later,
    resources_written_as,
)
from airflow_stepop.operators.capacity import CapacityFailover
from airflow_stepop.operators.completion import StepCompletion
from airflow_stepop.operators.image_wait import ImageWait
from airflow_stepop.operators.job_wait import JobWait
from airflow_stepop.operators.unknown_arguments import refuse_unknown_arguments
from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:  # imported where used: a DAG file's parse needs none of them
    from airflow_stepop.backends.base import JobRequest, JobService, StepBackend
    from airflow_stepop.operators.job_request import Staging
    from airflow_stepop.operators.step_cache import Lookup
    from airflow_stepop.operators.task_identity import TaskIdentity
    from airflow_stepop.settings import DockerSettings, ResourceSettings
    from airflow_stepop.triggers.deferral import StepJobDeferral


class BaseStepOperator(CapacityFailover, StepCompletion, ImageWait, JobWait, BaseOperator):
    """Run ``python_callable`` as a job on a step backend; see the README for the arguments."""

    template_fields = ("op_args", "op_kwargs", "environment", "cache_version")
    # Cloud operators show links to the job's console page and logs (see links/job.py).
    operator_extra_links: tuple = ()
    ui_color = "#c8e6f5"

    # The kinds of backend.links() this task process stored (see links/job.py); None: unknown.
    stored_link_kinds: frozenset[str] | None = frozenset()  # a task failed before execute()
    # The service's name in its [stepop] options, e.g. "sagemaker" for sagemaker_artifact_root.
    service: ClassVar[str | None] = None
    # The argument naming the step's Airflow connection (e.g. "gcp_conn_id"), looked up when
    # the task runs; a missing connection of the id ``ambient_default`` means the worker's own
    # credentials (the amazon provider's rule), not a mistake.
    connection_argument: ClassVar[str | None] = None
    ambient_default: ClassVar[str | None] = None
    # The operator's own arguments for waiting in its service's queue for capacity, named when
    # another service's (``flex_start=`` on SageMaker) is given to it.
    queued_capacity_arguments: ClassVar[tuple[str, ...]] = ()
    # What on_kill needs: whether the task was killed, and the job this try submitted or
    # re-attached to (with its backend), once there is one.
    _killed: bool = False
    _bind_when_rendered: bool = False  # op_args or op_kwargs is a template or an upstream output
    _handle: tuple[JobService, dict[str, Any]] | None = None
    _inline: StepJobDeferral | None = None  # the trigger this process runs (not deferrable)
    _cache_kept: dict[str, Any] | None = None  # the step cache key this try's job runs

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        resources: ResourceSettings | None = None,
        step_resources: ResourceSettings | None = None,
        docker: DockerSettings | None = None,
        artifact_root: str | None = None,
        deferrable: bool = True,
        poll_interval: float | None = None,
        environment: Mapping[str, str] | None = None,
        cache: bool | None = None,
        cache_version: str | None = None,
        cache_expires_after: timedelta | float | None = None,
        fallback_types: Sequence[str] | None = None,
        capacity_attempts: int | None = None,
        **kwargs: Any,
    ) -> None:
        refuse_unknown_arguments(type(self), kwargs)
        check_default_args(kwargs.get("default_args"))
        super().__init__(**kwargs)
        name = self.argument_owner
        self.resources_as = resources_written_as(resources, step_resources, kwargs)
        if resources is None:  # a mapped step's resources= (see partial()), or default_args'
            resources = step_resources
        check_step_arguments(
            name,
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            resources=resources,
            resources_as=self.resources_as,
            docker=docker,
            poll_interval=poll_interval,
            artifact_root=artifact_root,
        )
        self.python_callable = python_callable
        # a template or an upstream output stays as given: Airflow renders it, and the task
        # checks what it rendered to (a list or dict the callable takes) when it runs
        self._bind_when_rendered = rendered_later(op_args, op_kwargs)
        self.op_args = list(op_args) if isinstance(op_args, (list, tuple)) else op_args or []
        self.op_kwargs = dict(op_kwargs) if isinstance(op_kwargs, Mapping) else op_kwargs or {}
        self.resource_settings = resources
        self.docker_settings = docker
        self.artifact_root = artifact_root
        self.deferrable = check.boolean(name, "deferrable", deferrable)
        self.poll_interval = poll_interval
        self.environment = check.environment(name, environment)
        self.cache_expires_after = check_cache_arguments(
            name, cache, cache_version, cache_expires_after
        )
        self.cache, self.cache_version = cache, cache_version
        self.fallback_types = check_capacity_arguments(name, fallback_types, capacity_attempts)
        self.capacity_attempts = capacity_attempts

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        """``.partial(resources=ResourceSettings(...))`` for mapped steps.

        Airflow reserves ``resources`` of a mapped task for its own ``Resources`` and converts it
        when expanding, so a step's ``ResourceSettings`` travels as ``step_resources``.
        """
        kwargs = rename_step_resources(kwargs)
        return super().partial(**kwargs)

    @property
    def argument_owner(self) -> str:
        """How errors name this operator: as the user wrote it (``@task.vertex_step``, or the
        class name) with its task id, so an argument's error points at the task that passed it
        (a DAG's import error shows only the traceback's last frames, which are ours)."""
        name = getattr(self, "custom_operator_name", None) or type(self).__name__
        task_id = getattr(self, "task_id", None)
        return f"{name}(task_id={task_id!r})" if task_id else name

    def refuse_failover(self, why: str) -> None:
        """A backend with no machine types to fail over between refuses ``fallback_types`` and
        ``capacity_attempts``, saying ``why`` and what to do instead."""
        if self.fallback_types or self.capacity_attempts is not None:
            name = "fallback_types" if self.fallback_types else "capacity_attempts"
            raise SettingsError(f"{self.argument_owner}.{name}: {why}")

    # ---- what a service's subclass provides ------------------------------------------------

    def make_backend(self) -> StepBackend:
        raise NotImplementedError

    @property
    def storage_conn_id(self) -> str | None:
        """The Airflow connection that reaches the artifact root (None: ambient credentials)."""
        return None

    # ---- execute ---------------------------------------------------------------------------

    def execute(self, context: Any) -> Any:
        from airflow_stepop.operators.earlier_try import EarlierJobUnknownError, earlier_job
        from airflow_stepop.operators.job_links import store_links
        from airflow_stepop.operators.task_identity import task_identity

        self._started = time.time()  # execution_timeout counts from here, as Airflow's does
        self.stored_link_kinds = frozenset()  # none yet: a failure before submit stored none
        self._check_run_time_arguments()
        backend = self.make_backend()
        ti = context["ti"]
        identity = task_identity(context)
        store = context.get("task_state_store")
        try:
            decision = earlier_job(
                backend, store, ti.try_number, identity.key, self.storage_conn_id, self.log
            )
        except EarlierJobUnknownError as exc:  # it may still run: the last try stops it
            self._left_to_retry(backend, exc.handle, ti)
            raise
        if decision.reuse is not None:  # the UI links to the job that made the result
            reused = decision.reuse.handle
            self.stored_link_kinds = store_links(self.log, context, backend, reused)
            return decision.reuse.result
        handle = decision.attach
        if handle is None:
            return self._start(context, identity, backend)
        self.log.info(
            "Re-attaching to job %s, still running from an earlier try", shown_job(handle)
        )
        return self._follow(context, backend, {**handle, "earlier_try": True})

    def _check_run_time_arguments(self) -> None:
        """What only the running task can check: its connection, its rendered templates."""
        name = self.connection_argument
        if name:
            check_connection(self.argument_owner, name, getattr(self, name), self.ambient_default)
        if self._bind_when_rendered:  # concrete ones were checked at parse
            check_call_arguments(
                self.argument_owner, self.python_callable, self.op_args, self.op_kwargs
            )
        services = [f for f in self.template_fields if f not in BaseStepOperator.template_fields]
        refuse_empty_renders(self.argument_owner, {f: getattr(self, f, None) for f in services})

    def _start(
        self, context: Any, identity: TaskIdentity, backend: StepBackend, fresh: bool = True
    ) -> Any:
        """Submit the step's job and wait for it, unless the task was killed while it was being
        prepared; or, where a service builds the job's image first, start (or join) that build
        and defer until it has built the image (the trigger then creates the job).

        Airflow's task runner answers SIGTERM (a user's mark or clear) by calling ``on_kill``
        and lets ``execute()`` go on until the process is killed a few seconds later: a job
        submitted in that window would run with nobody watching it."""
        # the [stepop] numbers this task and its trigger read: a wrong one starts no job (read
        # only now, so a try that finds an earlier job still re-attaches to it or stops it)
        config.check_numbers()
        from airflow_stepop.operators import step_cache
        from airflow_stepop.operators.job_request import encode_request

        if fresh:  # not the next machine type of a failover (``operators/capacity``)
            self._reset_attempts(context)
        staging = encode_request(self, context, identity, backend)
        cached = step_cache.check(self, context, backend, staging) if fresh else None
        if cached is not None and cached.hit is not None:
            staging.encoded.discard()
            return self._cache_hit(context, backend, cached.hit)
        request = self._prepare(context, identity, staging, cached)
        request = self._attempt_request(context, backend, request)
        prepared = backend.prepare(request)
        if prepared.image_build is not None:
            return self._wait_for_image(context, backend, prepared)
        if self._killed:
            from airflow_stepop.backends.outcome import StepKilledError

            raise StepKilledError("The task was killed before its job was submitted: no job ran")
        from airflow_stepop.backends.base import NoCapacityError
        from airflow_stepop.operators.task_identity import submit_as_own

        ti = context["ti"]
        try:
            submitted = submit_as_own(backend, request, ti.try_number, self.log, prepared)
        except NoCapacityError as exc:  # nothing started: the next machine type, if any
            return self._fail_over(context, backend, exc.reason)
        handle = {**submitted, "submitted_at": time.time()}
        self._handle = (backend, handle)  # from now on, on_kill stops it
        self.log.info("Submitted job %s", shown_job(handle))
        if self._killed:  # the kill came while the submit was on its way
            self._stop_killed(backend, handle)
        return self._follow(context, backend, handle)

    def step_artifact_root(self) -> str:
        """The operator's artifact_root, else the service's [stepop] option, else the default."""
        return self.artifact_root or config.artifact_root(self.service)

    def _mapped_over(self) -> bool:
        """Whether a task maps over this one's result: Airflow maps over a list or dict XCom
        only, never over a reference to one, so such a result is kept a list or dict."""
        return self.has_dag() and next(self.iter_mapped_dependants(), None) is not None

    def _prepare(
        self, context: Any, identity: TaskIdentity, staging: Staging, cached: Lookup | None = None
    ) -> JobRequest:
        """Upload code and inputs, write the spec (``job_request``): what the job reads, as
        the request to submit. With ``cached`` (the step caches), the spec names the key, and
        the task state store keeps it for the entry the job's success writes."""
        from airflow_stepop.operators import step_cache
        from airflow_stepop.operators.job_request import job_request

        extra = {"cache_key": cached.key.digest} if cached is not None else None
        request = job_request(self, context, identity, staging, extra)
        if cached is not None:
            self._cache_kept = step_cache.remember_key(
                context.get("task_state_store"), context["ti"], cached.key, staging.root,
                request.spec_sha256, self.log,
            )  # fmt: skip
        return request

    def _cache_hit(self, context: Any, backend: StepBackend, hit: Any) -> Any:
        """The result the step cache verified: the UI links to the job that made it."""
        from airflow_stepop.operators.job_links import store_links
        from airflow_stepop.operators.step_cache import report_hit

        self.stored_link_kinds = store_links(self.log, context, backend, hit.record.handle)
        report_hit(self.log, context["ti"], backend, hit)
        return hit.result

    def on_kill(self) -> None:
        """SIGTERM (a user's mark or clear, ``execution_timeout``): stop the job this try
        submitted or re-attached to. Before the submit there is none yet: ``_killed`` keeps
        ``execute()``, which Airflow lets go on, from submitting one."""
        self._killed = True  # a stop to end with, not one to run the step again after
        following = self._inline.following() if self._inline is not None else self._handle
        if following is not None and not following[1].get("joined"):
            service, job = following  # a build other tasks wait for goes on for them
            self.log.info("Stopping %s", shown_job(job))
            service.stop(job)
