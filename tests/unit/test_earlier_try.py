"""What a retry does about the job an earlier try of its task instance recorded."""

from __future__ import annotations

import logging

import pytest

from airflow_stepop.backends.base import JobStatus
from airflow_stepop.operators.earlier_try import STATE_KEY, EarlierJobUnknownError, earlier_job
from tests.unit.backend_doubles import TriggerSideBackend

LOG = logging.getLogger("tests.earlier_try")


class GoneJobBackend(TriggerSideBackend):
    """A service that answers a describe of the recorded job with ``error``."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error

    def is_gone(self, exc):
        return isinstance(exc, LookupError)

    async def astatus(self, handle):
        if self.error is not None:
            raise self.error
        return JobStatus("running")


def _store(job_id: str) -> dict:
    return {STATE_KEY: {"handle": {"job_id": job_id}, "try_number": 1}}


def test_a_recorded_job_the_service_no_longer_has_is_run_again(caplog):
    """A deleted job's describe fails for good: every retry used to fail on it, for ever."""
    backend = GoneJobBackend(LookupError("CustomJob 123 is not found"))
    with caplog.at_level(logging.WARNING):
        decision = earlier_job(backend, _store("job-123"), 2, "d/r/t/-1", None, LOG)
    assert decision.attach is None and decision.reuse is None  # submit anew
    assert "The earlier job job-123 is gone (CustomJob 123 is not found)" in caplog.text


@pytest.mark.parametrize(
    "error",
    [ConnectionError("connection reset"), PermissionError("AccessDenied: not authorized")],
    ids=["no answer", "access denied"],
)
def test_a_job_the_service_does_not_say_is_gone_fails_the_try_rather_than_run_a_second(error):
    """An access-denied describe used to count as a gone job: the retry submitted a second job
    while the first ran on, unwatched and billed."""
    backend = GoneJobBackend(error)
    with pytest.raises(EarlierJobUnknownError) as failed:
        earlier_job(backend, _store("job-123"), 2, "d/r/t/-1", None, LOG)
    assert str(failed.value).startswith(
        f"Cannot look up job job-123 of an earlier try ({type(error).__name__}: {error}); "
        "this try fails rather than start a second job"
    )


def test_a_recorded_job_still_running_is_re_attached_to():
    decision = earlier_job(GoneJobBackend(None), _store("job-123"), 2, "d/r/t/-1", None, LOG)
    assert decision.attach == {"job_id": "job-123"}


def test_a_recorded_job_being_stopped_is_not_re_attached_to_but_run_again(caplog):
    """A user cleared the deferred task: its trigger is cancelling the job as the retry starts.
    Re-attaching to it (as before) cost a try: the job ended 'stopped' seconds later."""

    class Cancelling(GoneJobBackend):
        async def astatus(self, handle):
            return JobStatus("running", stopping=True)

    with caplog.at_level(logging.INFO):
        decision = earlier_job(Cancelling(None), _store("job-123"), 2, "d/r/t/-1", None, LOG)
    assert decision.attach is None and decision.reuse is None
    assert "The earlier job job-123 is being stopped; running the step again" in caplog.text


@pytest.mark.parametrize(
    ("mapping", "answer"),
    [
        ("sagemaker", {"TrainingJobStatus": "Stopping", "SecondaryStatus": "Stopping"}),
        ("vertex", "JOB_STATE_CANCELLING"),
        ("azureml", "CancelRequested"),
    ],
)
def test_each_services_stopping_state_says_so(mapping, answer):
    from airflow_stepop.backends.azureml.launch import map_status as azureml
    from airflow_stepop.backends.sagemaker.job import map_status as sagemaker
    from airflow_stepop.backends.vertex.api import map_state

    status = {"sagemaker": sagemaker, "azureml": azureml, "vertex": lambda s: map_state(s, None)}[
        mapping
    ](answer)
    assert status.state == "running" and status.stopping
