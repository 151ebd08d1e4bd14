"""The values that pass between a step backend and its callers: a job's request, its status,
its record, a machine to run on, a job made ready to create, and the errors a create answers
with. Kept apart from the contract's methods (``base.StepBackend``), which is long enough on
its own; ``base`` re-exports each of them, and the docs import them from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:  # annotations only: a DAG without settings never builds one
    from airflow_stepop.backends.image_build import ImageBuild
    from airflow_stepop.settings import DockerSettings, ResourceSettings

JobState = Literal["pending", "running", "succeeded", "failed", "stopped"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "stopped"})


@dataclass(frozen=True)
class JobRequest:
    """Everything a backend needs to start one step's job."""

    job_name: str
    task_key: str  # the same for every try of one task instance: finds a live job to re-attach
    spec_uri: str
    run_uri: str
    code_uri: str
    resources: ResourceSettings | None = None
    docker: DockerSettings | None = None
    environment: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    # What the job checks before it runs anything from the artifact store (``bootstrap``):
    # the spec's and the code bundle's sha256 as the worker staged them.
    spec_sha256: str = ""
    code_sha256: str = ""
    # Airflow's id of this try (``ti.id``, new for every try and every re-created run): the
    # job carries it, so a job of the same name is only ever taken for this try's own.
    try_id: str = ""
    # The machine type of this attempt, one of ``StepBackend.machine_choices()`` (None: the
    # backend's configured one): a step fails over to the next when the service has none.
    machine: str | None = None

    def __post_init__(self) -> None:
        if not self.code_sha256:  # a bundle's name is its digest (``<sha256>.zip``)
            name = self.code_uri.rstrip("/").rsplit("/", 1)[-1].removesuffix(".zip")
            if len(name) == 64 and all(c in "0123456789abcdef" for c in name):
                object.__setattr__(self, "code_sha256", name)

    def owns(self, job_try_id: str | None) -> bool:
        """Whether a job of this request's name that carries ``job_try_id`` is this try's own
        (its create's answer was lost): one that another try started never is."""
        return not self.try_id or job_try_id == self.try_id

    def to_json(self) -> dict[str, Any]:
        """The request as JSON, for a ``PreparedJob`` body (``from_json`` makes it again)."""
        import dataclasses

        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["resources"] = self.resources.to_dict() if self.resources else None
        out["docker"] = self.docker.to_dict() if self.docker else None
        return out

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> JobRequest:
        from airflow_stepop.settings import DockerSettings, ResourceSettings

        values = dict(document)
        if values.get("resources") is not None:
            values["resources"] = ResourceSettings(**values["resources"])
        if values.get("docker") is not None:
            values["docker"] = DockerSettings(**values["docker"])
        return cls(**values)

    @property
    def checkpoint_uri(self) -> str:
        """The task instance's checkpoints, beside its tries' run directories: shared by every
        try, so a retry (or a restarted spot job) resumes from them (``$STEPOP_CHECKPOINT_DIR``)."""
        return self.run_uri.rstrip("/").rsplit("/", 1)[0] + "/checkpoints"


class MachineChoice(NamedTuple):
    name: str  # the service's machine type (instance type, machine type, VM size)
    price_per_hour: float | None  # of the whole job (every machine), as the catalog has it


class NoCapacityError(RuntimeError):
    """The service refused to create the job for want of capacity or quota for its machine
    type (SageMaker's ResourceLimitExceeded, Vertex AI's RESOURCE_EXHAUSTED): nothing started,
    and the step fails over to its next machine type."""

    def __init__(self, machine: str | None, reason: str) -> None:
        self.machine = machine
        self.reason = reason
        super().__init__(reason)


class JobNameTakenError(RuntimeError):
    """``submit`` found a job of the request's name that another try started (another run of
    the same run_id, another Airflow on the same account): never this try's to attach to."""

    def __init__(self, job_name: str, owner: str | None) -> None:
        self.job_name = job_name
        self.owner = owner  # that job's try id, when the service told it
        super().__init__(
            f"A job named {job_name} exists already and belongs to another try "
            f"(Airflow task instance id {owner or 'unknown'}), not this one"
        )


@dataclass(frozen=True)
class JobStatus:
    state: JobState
    # the service's own words for a failure (capacity, OOM, ...), or for why a job that has not
    # ended waits (no node can take it): the task log's progress line shows the latter
    reason: str | None = None
    # Small JSON facts of a finished job that the operator reports (e.g. billable seconds):
    # they ride in the trigger's event, so the worker needs no call of its own to get them.
    details: dict[str, Any] = field(default_factory=dict)
    # A failure the service still holds (a paused or unresponsive job): it is cancelled when
    # the step fails, so it waits on nobody and costs nothing more.
    held: bool = False
    # A running job asked to stop (SageMaker's Stopping, Vertex AI's CANCELLING, Azure ML's
    # CancelRequested): it ends without a result, so a retry runs the step again, not re-attach.
    stopping: bool = False
    # A failure for want of capacity or quota for the job's machine type, by the service's own
    # code (SageMaker's CapacityError, Vertex AI's stockouts, Azure ML's capacity failures):
    # the step fails over to its next machine type (``StepBackend.machine_choices``).
    capacity: bool = False
    # A pending job waiting in the service's queue for capacity it was told to wait for
    # (Vertex AI's FLEX_START, a SageMaker training plan, Azure ML's job queue): the task log
    # says "queued for capacity since ...", and no failover happens while it waits.
    queued: bool = False

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


class JobRecord(NamedTuple):
    """What a service's own record of a job says, for the step cache (``StepBackend.job_record``):
    its status, the sha256 of the spec it was submitted with (None where the record has none),
    and its handle as made from that record (where it read its spec, where its results are)."""

    status: JobStatus
    spec_sha256: str | None
    handle: dict[str, Any]


@dataclass(frozen=True)
class PreparedJob:
    """A job made ready on the worker (code, inputs, documents staged; its request checked):
    ``create(body)`` starts it. ``body`` is JSON, since it may wait in the trigger's arguments
    while ``image_build`` runs: the triggerer then creates the job the moment the image is in
    its registry, with no worker slot held meanwhile."""

    body: dict[str, Any]
    # A build of the job's image that a service runs (``backends.image_build``); None: the
    # image is in its registry already (or the worker's engine built it).
    image_build: ImageBuild | None = None
