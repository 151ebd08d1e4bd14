"""The contract every backend fulfils, so operators and the trigger stay generic.

Worker-side calls are synchronous (``execute()`` must stay short); triggerer-side calls are
async and must not block the event loop. A job is known by a ``handle``: a small JSON dict the
backend makes at submit time and the trigger carries (it always has ``job_id`` and
``run_uri``, the run directory of the attempt that started the job; ``output_uri`` when the
job's results land elsewhere, e.g. where the service uploads its output directory).

How the calls scale with many steps (services rate-limit per account and region):

* re-attach: the operator keeps each submitted handle in Airflow's task state store, so a retry
  asks ``status(handle)`` (one describe) of exactly the earlier job; ``find_active`` (a List
  call) is only the fallback for a worker lost between submit and that record;
* polling: every trigger of one ``poll_group()`` in a triggerer process shares one poller that
  calls ``astatuses`` with all watched handles (one List answers for many jobs); a job it
  reports terminal gets one ``astatus`` (a describe) for its final facts;
* List calls of one poll group (the poller's and ``find_active``'s) share one rate limit:
  :func:`airflow_stepop.backends.ratelimit.list_limiter`.
"""

from __future__ import annotations

import abc
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

# The values the contract passes live in ``job_types``; they are imported from here too.
from airflow_stepop.backends.job_types import (
    TERMINAL,
    JobNameTakenError,
    JobRecord,
    JobRequest,
    JobState,
    JobStatus,
    MachineChoice,
    NoCapacityError,
    PreparedJob,
)

if TYPE_CHECKING:  # annotations only: a DAG without settings never builds one
    from airflow_stepop.settings import DockerSettings


class JobService(abc.ABC):
    """A service whose jobs a trigger follows: a step's job, or the build of its image.

    The async half runs in the triggerer (``StepJobTrigger``, its shared poller and its log
    relay); ``status`` and ``stop`` are the worker's.
    """

    # The trigger's first poll comes this soon, then the wait doubles up to poll_interval:
    # short local jobs finish fast; services that take minutes to start get fewer calls.
    first_poll_seconds: float = 0.25

    @abc.abstractmethod
    def serialize(self) -> dict[str, Any]:
        """Keyword arguments that rebuild this service's client in the triggerer."""

    def status(self, handle: dict[str, Any]) -> JobStatus:
        """The job's state, from the worker (a retry deciding to re-attach, reuse or re-run)."""
        import asyncio

        return asyncio.run(self.astatus(handle))

    def poll_group(self) -> str:
        """Triggers whose services share a poll group share one poller and one List rate limit.

        The service plus whatever scopes its List calls and quotas (account and region, project
        and location, workspace). The default, this object's own arguments, never over-shares.
        """
        import json

        return f"{type(self).__module__}.{type(self).__qualname__}:" + json.dumps(
            self.serialize(), sort_keys=True, default=str
        )

    def prepare_async(self) -> None:  # noqa: B027 - optional: the local backend needs none
        """Before the first async call, in a thread: import and read what the async calls need
        (a cloud SDK's modules, the connection, credentials). A cloud SDK's first import takes
        seconds; on the triggerer's event loop it would stall every trigger of the process
        (log relays, deadlines, kills) meanwhile. The async calls must import nothing heavy
        that this did not."""

    @abc.abstractmethod
    def stop(self, handle: dict[str, Any]) -> None:
        """Stop the job (idempotent)."""

    @abc.abstractmethod
    async def astatus(self, handle: dict[str, Any]) -> JobStatus:
        """One job's state from one describe; a terminal answer carries the final ``details``."""

    async def astatuses(self, handles: list[dict[str, Any]]) -> dict[str, JobStatus]:
        """The states of many jobs (job_id -> status) in as few calls as the service allows.

        A job the answer leaves out is asked with ``astatus`` by the poller. Terminal states may
        come without ``details``: the poller asks ``astatus`` once more for those. The default
        asks each job on its own.
        """
        import asyncio

        answers = await asyncio.gather(*(self.astatus(h) for h in handles), return_exceptions=True)
        out: dict[str, JobStatus] = {}
        for handle, answer in zip(handles, answers, strict=True):
            if isinstance(answer, BaseException):
                raise answer
            out[handle["job_id"]] = answer
        return out

    @abc.abstractmethod
    async def alogs(self, handle: dict[str, Any], cursor: Any) -> tuple[list[str], Any]:
        """New log lines since ``cursor`` (None at first) and the cursor to use next.

        Each call to a log service first takes a token of ``log_limiter(self.poll_group())``
        (``try_acquire``; none left: stop here and return what was read, the cursor where it
        stopped), so log calls stay within a per-process budget however many jobs run: each
        job's lines come less often, never lost. A finished job's last read takes no token:
        it happens once per job, and no task should wait on other jobs' logs to end.
        """

    @abc.abstractmethod
    async def astop(self, handle: dict[str, Any]) -> None: ...

    async def aclose(self) -> None:
        """Close what the async calls keep open (clients); the poller calls it when it ends."""
        return None

    def forget(self, handle: dict[str, Any]) -> None:  # noqa: B027 - optional: most keep nothing
        """Drop what the async calls keep about one job (its last state, its final read): no
        trigger watches it any more. A poller's service lives as long as its poll group has
        triggers, on a busy triggerer for ever."""

    def is_transient(self, exc: Exception) -> bool:
        """Whether a failed call is worth retrying after a pause (throttling, 5xx, network)."""
        return isinstance(exc, (ConnectionError, TimeoutError))


class StepBackend(JobService):
    """A service that runs step jobs.

    Its job starts in two halves: ``prepare(request)`` on the worker (stage what the job reads,
    check the request, decide the image) and ``create(body)`` (one idempotent create call),
    on the worker, or in the triggerer once a service has built the job's image. A backend
    whose images no service builds may implement ``submit`` alone: the default ``prepare``
    carries the request as the body and the default ``create`` submits it.
    """

    def prepare(self, request: JobRequest) -> PreparedJob:
        """Everything before the create call; ``image_build`` when a service builds the job's
        image first (the trigger waits for it, then calls ``create``)."""
        return PreparedJob({"request": request.to_json()})

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create the job ``prepare`` made ready; return its handle: ``job_id`` (what the
        service's API calls take), and ``display_name`` where users know the job by another
        name (``naming.shown_job``).

        A job of the same name may exist already: this try's own, whose create answer was lost
        (it carries the request's try id: return its handle), or another try's (raise
        ``JobNameTakenError``; the operator submits again under another name)."""
        return self.submit(JobRequest.from_json(body["request"]))

    def submit(self, request: JobRequest) -> dict[str, Any]:
        """Prepare and create in one call: a backend's own short form, or (where ``prepare``
        and ``create`` are its own) a script's or a test's, which waits here for a service's
        image build."""
        if type(self).create is StepBackend.create:
            raise NotImplementedError(f"{type(self).__name__} implements neither submit nor create")
        prepared = self.prepare(request)
        if prepared.image_build is not None:
            prepared.image_build.wait()
        return self.create(prepared.body)

    @abc.abstractmethod
    def find_active(self, task_key: str) -> dict[str, Any] | None:
        """The handle of a job of this task instance that is still alive, if any.

        A fallback that may cost a List call: take a token of ``list_limiter(self.poll_group())``
        before each one.
        """

    @abc.abstractmethod
    def job_record(self, job_id: str) -> JobRecord:
        """What the service's own record of job ``job_id`` says: its status, its handle, and
        the sha256 of the spec it was submitted with (``STEPOP_SPEC_SHA256`` in its
        environment, stored with the job at its create, never changed after). Looked up where
        this backend starts jobs (its account, project, workspace or jobs directory), never
        where a caller says: the id comes from a cache entry in the artifact store. The step
        cache uses a result only when the job that made it ran a spec naming the same key.
        Raises what ``status`` raises; ``is_gone`` tells a job the service no longer has."""

    def machine_choices(self) -> tuple[MachineChoice, ...]:
        """The machine types this step may run on, in the order to try them: the one its
        configuration chose (named, or the cheapest that fits ``resources``), then those it
        fails over to when the service reports no capacity (``JobStatus.capacity``,
        ``NoCapacityError``); () where the service has no such choice (the local backend).
        ``prepare`` runs a request's ``machine`` instead of the configured one."""
        return ()

    def environment_id(self, docker: DockerSettings | None) -> str:
        """What the job runs in, as the step cache keys it, with no registry call and no build:
        the content hash of ``docker``'s image (what its tag is made of). A backend that runs
        a named image (``image_uri=``) or an interpreter of its own says so instead."""
        from airflow_stepop.images.builder import environment_hash

        return f"docker:{environment_hash(docker)}" if docker is not None else "no image"

    def artifact_root(self, root: str) -> str:
        """The URL the worker stages to for a configured artifact root: the root itself, or
        what a service's own storage name resolves to (an Azure ML datastore path)."""
        return root

    def release(self, handle: dict[str, Any]) -> None:
        """Free what a finished job still holds (e.g. a stopped container); logs were relayed."""
        return None

    def is_gone(self, exc: Exception) -> bool:
        """Whether a failed ``status`` call says the service has no such job (deleted,
        expired): a retry then runs the step again. Any other failure (access denied, say)
        fails the retry instead, since a second job beside one that may still run would be
        paid for twice."""
        return isinstance(exc, FileNotFoundError)

    # The XCom key under which the operator pushes billing(details), e.g. "sagemaker_billing".
    billing_xcom_key: str | None = None

    def billing(self, details: dict[str, Any]) -> dict[str, Any] | None:
        """What the finished job cost, from a terminal status's ``details``: ``job_name``,
        ``machine``, ``count`` (machines), ``billable_seconds`` (of one machine), ``spot``,
        ``price_per_hour_usd`` (one machine), ``estimated_cost_usd`` (price x billable seconds x
        count), ``catalog_date``; None when the service reports no billing."""
        return None

    def links(self, handle: dict[str, Any]) -> dict[str, str]:
        """Console links for the job (name -> URL), made from the handle without a call to the
        service (a resumed task recomputes them); none for backends without a console."""
        return {}


def service_refusal(
    service: str,
    reason: str,
    argument: str | None = None,
    value: Any = None,
    known: Collection[str] = (),
) -> Exception:
    """The service refused the job's request (HTTP 400) and started nothing: its own reason
    (its first line, less the request line an HTTP client puts first), and, when the reason
    names a machine type (``argument``) our catalog does not list (taken as given at parse, so
    a typo reaches the service), the closest ones it does."""
    import difflib
    import re

    from airflow_stepop.setting_values import SettingsError

    first = (reason.splitlines() or [""])[0]
    reason = " ".join(re.sub(r"^[A-Z]+ https?://\S+: ", "", first).split())
    hint = ""
    if argument and isinstance(value, str) and value not in known and value in reason:
        close = difflib.get_close_matches(value, sorted(known), n=3, cutoff=0.6)
        if close:
            hint = (
                f" {argument}={value!r} is not in our catalog; the closest there: "
                f"{', '.join(map(repr, close))}."
            )
    return SettingsError(f"{service} refused the job and started nothing: {reason}{hint}")


def billing_record(
    *,
    job_name: str | None,
    machine: str,
    count: int,
    billable_seconds: float,
    spot: bool,
    price_per_hour: float | None,
    catalog_date: str | None,
    **service_facts: Any,
) -> dict[str, Any]:
    """``StepBackend.billing``'s keys, the cost worked out one way for every service (price of
    one machine x billable seconds of one machine x machines), then the service's own facts."""
    cost = None if price_per_hour is None else price_per_hour / 3600 * billable_seconds * count
    return {
        "job_name": job_name,
        "machine": machine,
        "count": count,
        "billable_seconds": billable_seconds,
        "spot": spot,
        "price_per_hour_usd": price_per_hour,
        "estimated_cost_usd": None if cost is None else round(cost, 6),
        "catalog_date": catalog_date,
        **service_facts,
    }


__all__ = [
    "TERMINAL",
    "JobNameTakenError",
    "JobRecord",
    "JobRequest",
    "JobService",
    "JobState",
    "JobStatus",
    "MachineChoice",
    "NoCapacityError",
    "PreparedJob",
    "StepBackend",
    "billing_record",
    "service_refusal",
]
