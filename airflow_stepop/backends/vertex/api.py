"""Vertex AI and Cloud Logging clients through the google provider's connection.

Credentials come from ``GoogleBaseHook`` (key file or JSON, ADC, impersonation chain, or
anonymous for emulators); nothing of them is written anywhere. Endpoints come from the
connection's extras, so that an emulated cloud needs no code change:

``location``          the Vertex region when the operator gives none;
``vertex_endpoint``   JobService (default ``https://<location>-aiplatform.googleapis.com``);
``logging_endpoint``  Cloud Logging (default ``https://logging.googleapis.com``).

The worker uses the official JobService REST client; the triggerer uses its async REST
transport (``rest_asyncio``) and Cloud Logging's REST ``entries:list`` through aiohttp (the
logging library has no async REST transport), with a token the hook's credentials refresh in a
thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from airflow_stepop.backends.base import JobStatus

EXTRA_PREFIX = "extra__google_cloud_platform__"
TRANSIENT_HTTP = frozenset({408, 429, 500, 502, 503, 504})
PENDING = frozenset({"JOB_STATE_QUEUED", "JOB_STATE_PENDING"})
RUNNING = frozenset({"JOB_STATE_RUNNING", "JOB_STATE_UPDATING", "JOB_STATE_CANCELLING"})
ALIVE = frozenset({"JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING"})
# google.rpc.Code RESOURCE_EXHAUSTED: a CustomJob's ``error.code`` when it could not get its
# machines, a stockout ("Resources are insufficient in region: ...", "The zone does not have
# enough resources available ...") or the project's quota of them ("The following quota metrics
# exceed quota limits: ..."), whatever the message's words. A failure of the step's own (a
# replica's non-zero exit status) is code 3, INVALID_ARGUMENT.
CODE_RESOURCE_EXHAUSTED = 8
# The quotas a CustomJob's machines draw on (custom_model_training_cpus,
# custom_model_training_nvidia_t4_gpus, custom_model_training_tpu_v2...), as a 429
# RESOURCE_EXHAUSTED at CreateCustomJob names them; a throttled API call (also 429
# RESOURCE_EXHAUSTED) names a request-rate quota instead, and is retried.
MACHINE_QUOTA = re.compile(r"aiplatform\.googleapis\.com/(custom_model_training_[a-z0-9_]+)")


class VertexApiError(RuntimeError):
    """A refused REST call (Cloud Logging), with its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


def is_transient_error(exc: BaseException) -> bool:
    """Throttling (429), 5xx, timeouts and connection problems, from any client we use."""
    from google.api_core import exceptions as core

    if isinstance(exc, core.GoogleAPICallError):
        return isinstance(exc.code, int) and exc.code in TRANSIENT_HTTP
    if isinstance(exc, VertexApiError):
        return exc.status in TRANSIENT_HTTP
    if isinstance(exc, core.RetryError):
        return True
    try:
        import aiohttp
        from google.auth.exceptions import TransportError
        from requests.exceptions import ConnectionError as RequestsConnectionError

        if isinstance(
            exc, (aiohttp.ClientConnectionError, TransportError, RequestsConnectionError)
        ):
            return True
    except ImportError:  # pragma: no cover
        pass
    return isinstance(exc, (ConnectionError, TimeoutError, asyncio.TimeoutError))


def machine_quota(exc: BaseException) -> str | None:
    """The machine quota a CreateCustomJob refused for (``custom_model_training_nvidia_t4_gpus``),
    None for any other error. Vertex answers a spent quota and a throttled call alike (HTTP 429,
    RESOURCE_EXHAUSTED): the quota metric tells them apart, from the error's ErrorInfo where the
    service sends one (``metadata.quota_metric``), else as its message names it."""
    from google.api_core import exceptions as core

    if not isinstance(exc, core.GoogleAPICallError) or exc.code != 429:
        return None
    metric = (getattr(exc, "metadata", None) or {}).get("quota_metric") or exc.message or ""
    found = MACHINE_QUOTA.search(metric)
    return found.group(1) if found else None


def map_state(state: str, error: str | None, code: int = 0) -> JobStatus:
    """A CustomJob state (and its ``error``'s message and code) -> JobStatus; PAUSED and
    EXPIRED are failures, never success; a FAILED job's code 8 (RESOURCE_EXHAUSTED) is a
    capacity failure (``CODE_RESOURCE_EXHAUSTED``), which the step fails over from."""
    if state == "JOB_STATE_SUCCEEDED":
        return JobStatus("succeeded")
    if state == "JOB_STATE_CANCELLED":
        return JobStatus("stopped", "the CustomJob was cancelled")
    if state in PENDING:
        return JobStatus("pending")
    if state in RUNNING:
        return JobStatus("running", stopping=state == "JOB_STATE_CANCELLING")
    if state == "JOB_STATE_PAUSED":
        reason = "JOB_STATE_PAUSED: the job was paused (not a success)"
        return JobStatus("failed", reason, held=True)
    capacity = state == "JOB_STATE_FAILED" and code == CODE_RESOURCE_EXHAUSTED
    return JobStatus("failed", f"{state}: {error or 'the job did not succeed'}", capacity=capacity)


@dataclass
class GoogleAccess:
    """One connection's credentials, project, location and endpoints."""

    gcp_conn_id: str
    impersonation_chain: tuple[str, ...] = ()
    project_id: str | None = None
    location: str | None = None

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments a Vertex AI backend or a Cloud Build builder is made again
        from in the triggerer: the connection's id and scopes, never its secret."""
        return {
            "gcp_conn_id": self.gcp_conn_id,
            "project_id": self.project_id,
            "location": self.location,
            "impersonation_chain": list(self.impersonation_chain),
        }

    @cached_property
    def hook(self) -> Any:
        from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

        return GoogleBaseHook(
            gcp_conn_id=self.gcp_conn_id,
            impersonation_chain=list(self.impersonation_chain) or None,
        )

    def extra(self, name: str) -> Any:
        extras = self.hook.extras or {}
        return extras.get(name) or extras.get(EXTRA_PREFIX + name)

    @cached_property
    def project(self) -> str:
        project = self.project_id or self.hook.project_id
        if not project:
            from airflow_stepop.setting_values import SettingsError

            raise SettingsError(
                f"The step has no Google Cloud project: project_id= is not set and the "
                f"connection {self.gcp_conn_id!r} names none. Set the step's project_id= or the "
                "connection's 'project' extra."
            )
        return project

    @cached_property
    def region(self) -> str:
        from airflow_stepop import config

        return self.location or self.extra("location") or config.get("vertex_location")

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"

    @property
    def vertex_endpoint(self) -> str:
        return self.extra("vertex_endpoint") or f"{self.region}-aiplatform.googleapis.com"

    @property
    def logging_endpoint(self) -> str:
        return (self.extra("logging_endpoint") or "https://logging.googleapis.com").rstrip("/")

    @cached_property
    def credentials(self) -> Any:
        return self.hook.get_credentials()

    @property
    def anonymous(self) -> bool:
        from google.auth.credentials import AnonymousCredentials

        return isinstance(self.credentials, AnonymousCredentials)

    def token(self) -> str | None:
        """A fresh access token (blocking: call it in a thread from async code)."""
        if self.anonymous:
            return None
        if not self.credentials.valid:
            from google.auth.transport.requests import Request

            self.credentials.refresh(Request())
        return self.credentials.token

    # ---- clients -------------------------------------------------------------------------

    @cached_property
    def jobs(self) -> Any:
        """The JobService REST client (worker side)."""
        from google.api_core.client_options import ClientOptions
        from google.cloud import aiplatform_v1

        return aiplatform_v1.JobServiceClient(
            transport="rest",
            client_options=ClientOptions(api_endpoint=self.vertex_endpoint),
            credentials=self.credentials,
        )

    def prepare_async(self) -> None:
        """Read the connection and import what ``ajobs`` and ``log_entries`` use, in a thread:
        ``aiplatform_v1`` alone takes 2-6 s to import, which would stall the triggerer's loop."""
        self.project, self.region, self.credentials  # noqa: B018 - cached reads of the connection
        import aiohttp  # noqa: F401
        from google.api_core.client_options import ClientOptions  # noqa: F401
        from google.auth.aio import credentials  # noqa: F401
        from google.cloud import aiplatform_v1  # noqa: F401 - with its rest_asyncio transport

    @contextlib.asynccontextmanager
    async def ajobs(self) -> AsyncIterator[Any]:
        """An async JobService client for one use (its HTTP session closes after it)."""
        from google.api_core.client_options import ClientOptions
        from google.auth.aio import credentials as aio
        from google.cloud import aiplatform_v1

        token = await asyncio.to_thread(self.token)
        credentials = aio.AnonymousCredentials() if token is None else aio.StaticCredentials(token)
        client = aiplatform_v1.JobServiceAsyncClient(
            transport="rest_asyncio",
            client_options=ClientOptions(api_endpoint=self.vertex_endpoint),
            credentials=credentials,
        )
        async with client:
            yield client

    async def log_entries(self, body: dict[str, Any]) -> dict[str, Any]:
        """One Cloud Logging ``entries:list`` call."""
        import aiohttp

        token = await asyncio.to_thread(self.token)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        url = f"{self.logging_endpoint}/v2/entries:list"
        timeout = aiohttp.ClientTimeout(total=60)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(url, json=body, headers=headers) as answer,
        ):
            if answer.status >= 400:
                raise VertexApiError(answer.status, (await answer.text())[:500])
            return await answer.json()

    def registry_password(self) -> str | None:
        """An OAuth access token for Artifact Registry's docker login (None: anonymous)."""
        return self.token()
