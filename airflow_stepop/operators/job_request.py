"""What a step's job reads: its code, inputs and spec, staged, and the request to submit it.

Runs in ``execute()`` after the run-time checks, before the submit: the environment and
arguments are checked for secrets here, as nothing of them may reach object storage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_stepop import config
from airflow_stepop.operators.arguments import rendered_environment
from airflow_stepop.packaging.secret_checks import (
    refuse_secret_arguments,
    refuse_secret_settings,
    refuse_secrets,
)
from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:
    from airflow_stepop.backends.base import JobRequest, StepBackend
    from airflow_stepop.operators.base import BaseStepOperator
    from airflow_stepop.operators.task_identity import TaskIdentity
    from airflow_stepop.packaging.staging import EncodedStep
    from airflow_stepop.runtime.storage import Storage


class Staging(NamedTuple):
    """A step encoded on the worker, nothing uploaded yet (``packaging.staging``)."""

    encoded: EncodedStep
    root: str
    storage: Storage


def encode_request(
    op: BaseStepOperator, context: Any, identity: TaskIdentity, backend: StepBackend
) -> Staging:
    """Encode the step (its code bundle, inputs and spec, written locally): what the step
    cache keys, before anything is uploaded. The operator's ``environment`` is rendered and
    checked for secrets first."""
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.operators.context import context_arguments, without_pendulum
    from airflow_stepop.packaging.staging import StepIdentity, encode_step

    op.environment = rendered_environment(op.argument_owner, op.environment)
    refuse_secrets(op.argument_owner, op.environment)
    refuse_secret_settings(op.argument_owner, op.docker_settings)  # before a build or a push
    function, args, kwargs = op.python_callable, op.op_args, op.op_kwargs
    kwargs = {
        **context_arguments(op.argument_owner, function, args, kwargs, context),
        **kwargs,
    }
    args, kwargs = without_pendulum(tuple(args)), without_pendulum(kwargs)
    refuse_secret_arguments(op.argument_owner, args, kwargs)
    ti = context["ti"]
    root = backend.artifact_root(op.step_artifact_root())
    storage = worker_storage(op.storage_conn_id)
    encoded = encode_step(
        function,
        args,
        kwargs,
        root=root,
        step=StepIdentity(
            ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, identity.instance
        ),
        storage=storage,
        multiple_outputs=bool(op.multiple_outputs),
        inline_limit=config.get_int("inline_result_max_bytes"),
        mapped_downstream=op._mapped_over(),
    )
    return Staging(encoded, root, storage)


def job_request(
    op: BaseStepOperator,
    context: Any,
    identity: TaskIdentity,
    staging: Staging,
    extra: dict[str, Any] | None = None,
) -> JobRequest:
    """Upload code and inputs, write the spec (with ``extra`` fields: the step cache's key):
    everything the job reads, as the request the backend submits."""
    from airflow_stepop.artifacts.storage import missing_store
    from airflow_stepop.backends.base import JobRequest
    from airflow_stepop.backends.naming import job_name
    from airflow_stepop.packaging.staging import publish_step

    ti = context["ti"]
    try:
        staged = publish_step(staging.encoded, staging.storage, extra)
    except Exception as exc:
        store = missing_store(staging.root, staging.storage)
        if store is None:
            raise
        raise SettingsError(
            f"{op.argument_owner}: the artifact root {staging.root!r} is in {store}, which does "
            f"not exist (or {credentials_of(op.storage_conn_id)} cannot see it). Create it, "
            f"or set {config.artifact_root_options(op.service)} to a bucket or container "
            "that exists."
        ) from exc
    return JobRequest(
        job_name=job_name(identity.key, ti.try_number),
        task_key=identity.key,
        spec_uri=staged.spec_uri,
        run_uri=staged.run_uri,
        code_uri=staged.code_uri,
        spec_sha256=staged.spec_sha256,
        code_sha256=staged.code_sha256,
        try_id=identity.try_id,
        resources=op.resource_settings,
        docker=op.docker_settings,
        environment=op.environment,
        labels={
            "dag_id": ti.dag_id,
            "task_id": ti.task_id,
            "run_id": ti.run_id,
            "map_index": str(ti.map_index),
        },
    )


def credentials_of(conn_id: str | None) -> str:
    """Whose credentials the worker reads the artifact root with, for an error to name."""
    if conn_id:
        return f"the connection {conn_id!r}"
    return (
        "the worker's own credentials for it (no Airflow connection is named: those of its "
        "environment, such as AZURE_STORAGE_CONNECTION_STRING, AWS_PROFILE or "
        "GOOGLE_APPLICATION_CREDENTIALS)"
    )
