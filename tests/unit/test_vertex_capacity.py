"""Vertex AI capacity failover: the machines a step fails over to (checked at parse), its
machine choices, and the service's shortage signals (a 429 quota refusal at create, a job
FAILED with code 8)."""

from __future__ import annotations

import pytest
from airflow.sdk import DAG

from airflow_stepop import ResourceSettings, VertexStepOperator
from airflow_stepop.backends.base import JobRequest, NoCapacityError
from airflow_stepop.backends.vertex.api import machine_quota, map_state
from airflow_stepop.backends.vertex.backend import VertexBackend
from airflow_stepop.backends.vertex.config import VertexJobConfig
from airflow_stepop.backends.vertex.job import build_job
from airflow_stepop.catalog import NoFittingMachineError
from airflow_stepop.settings import SettingsError

IMAGE = "us-central1-docker.pkg.dev/my-project/train/env:1"
T4 = ResourceSettings(gpu_count=1, gpu_type="T4")
CHEAPEST_T4 = "n1-standard-4+NVIDIA_TESLA_T4x1"
QUOTA = (
    "The following quota metrics exceed quota limits: "
    "aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus"
)
THROTTLED = (
    "Quota exceeded for quota metric 'Resource management (CRUD) requests' and limit "
    "'Resource management (CRUD) requests per minute per region' of service "
    "'aiplatform.googleapis.com' for consumer 'project_number:000000000000'."
)


def _op(**kwargs):
    kwargs.setdefault("image_uri", IMAGE)
    with DAG("vx_capacity_args", schedule=None):
        return VertexStepOperator(task_id="t", python_callable=dict, **kwargs)


def test_a_machine_chosen_from_resources_fails_over_to_the_other_fitting_ones_cheapest_first():
    job = _op(resources=T4).job_config
    assert job.machine == CHEAPEST_T4
    assert job.fallback_types[:2] == (
        "n1-standard-8+NVIDIA_TESLA_T4x1",
        "n1-standard-8+NVIDIA_TESLA_T4x2",
    )
    assert CHEAPEST_T4 not in job.fallback_types
    assert all("+NVIDIA_TESLA_T4x" in name for name in job.fallback_types)


def test_a_named_machine_fails_over_only_to_the_machines_listed_in_the_catalogs_form():
    assert _op(machine_type="g2-standard-8").job_config.fallback_types == ()
    job = _op(
        machine_type="g2-standard-8",
        fallback_types=["g2-standard-4", "n1-standard-8+NVIDIA_TESLA_T4x1", "e2-standard-8"],
    ).job_config
    # a GPU type the catalog lists gets its accelerators filled in, as for machine_type=
    assert job.fallback_types == (
        "g2-standard-4+NVIDIA_L4x1",
        "n1-standard-8+NVIDIA_TESLA_T4x1",
        "e2-standard-8",
    )


def test_a_gpu_type_the_catalog_lacks_is_taken_with_its_accelerators_named():
    job = _op(
        machine_type="a3-highgpu-8g",
        fallback_types=["a3-megagpu-8g+NVIDIA_H100_MEGA_80GBx8"],
    ).job_config
    assert job.fallback_types == ("a3-megagpu-8g+NVIDIA_H100_MEGA_80GBx8",)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (  # the field, the value, what it lacks, and the fix
            {"resources": T4, "fallback_types": ["g2-standard-4"]},
            ["fallback_types[0]='g2-standard-4'", "lacks what resources=", "name one that fits"],
        ),
        (  # an n1 type's plain name is the machine without GPUs: the form with them is shown
            {"resources": T4, "fallback_types": ["n1-standard-8"]},
            ["fallback_types[0]='n1-standard-8'", "lacks", "'n1-standard-8+NVIDIA_TESLA_T4x1'"],
        ),
        (
            {"fallback_types": ["N1 standard"]},
            ["fallback_types[0]='N1 standard' is not a Vertex machine type", "MACHINE+"],
        ),
        (
            {"fallback_types": ["n1-standard-8+T4x1"]},
            ["fallback_types[0]='n1-standard-8+T4x1'", "'T4'", "not a Vertex accelerator"],
        ),
        (
            {"fallback_types": ["n1-standard-8+NVIDIA_TESLA_T4x3"]},
            ["fallback_types[0]=", "1, 2, 4 x NVIDIA_TESLA_T4", "not 3"],
        ),
        (
            {"fallback_types": ["e2-standard-8+NVIDIA_TESLA_T4x1"]},
            ["cannot be attached to 'e2-standard-8'", "'n1-standard-8+NVIDIA_TESLA_T4x1'"],
        ),
        (
            {"fallback_types": ["a2-highgpu-1g+NVIDIA_L4x1"]},
            ["comes with 1 x NVIDIA_TESLA_A100", "'a2-highgpu-1g+NVIDIA_TESLA_A100x1'"],
        ),
        (
            {"fallback_types": ["a3-megagpu-8g"]},
            ["fallback_types[0]='a3-megagpu-8g'", "'a3-megagpu-8g+KINDx8'"],
        ),
        (
            {"fallback_types": ["{{ var.value.machine }}"]},
            ["fallback_types[0]=", "not rendered"],
        ),
        (  # the same machine twice, as written once plain and once with its accelerators
            {
                "machine_type": "a2-highgpu-2g",
                "fallback_types": ["g2-standard-8", "g2-standard-8+NVIDIA_L4x1"],
            },
            ["names 'g2-standard-8+NVIDIA_L4x1' twice", "drop the repeat"],
        ),
        (
            {"resources": T4, "fallback_types": [CHEAPEST_T4]},
            [f"names {CHEAPEST_T4!r} twice (or the step's own type)"],
        ),
        (
            {
                "resources": T4,
                "persistent_resource_id": "warm-pool",
                "fallback_types": ["n1-standard-8+NVIDIA_TESLA_T4x1"],
            },
            ["persistent_resource_id='warm-pool'", "no other type", "Drop fallback_types"],
        ),
    ],
)
def test_a_bad_fallback_fails_the_dag_import_naming_the_field_the_value_and_the_fix(kwargs, words):
    with pytest.raises(SettingsError) as caught:
        _op(**kwargs)
    for word in words:
        assert word in str(caught.value)


def test_a_fallback_that_does_not_fit_is_the_catalogs_own_refusal():
    with pytest.raises(NoFittingMachineError):
        _op(resources=T4, fallback_types=["e2-standard-8"])


def test_a_persistent_resource_has_nothing_to_fail_over_to():
    job = _op(resources=T4, persistent_resource_id="warm-pool").job_config
    assert job.fallback_types == ()
    assert VertexBackend(job=job).machine_choices() == ()  # a shortage fails as any failure


def test_machine_choices_are_the_steps_machine_then_its_fallbacks_priced_for_the_whole_job():
    job = VertexJobConfig(
        machine_type="n1-standard-4", accelerator_type="NVIDIA_TESLA_T4", accelerator_count=1,
        replica_count=2, fallback_types=("n1-standard-8+NVIDIA_TESLA_T4x1", "c3-standard-8"),
    )  # fmt: skip
    choices = VertexBackend(project_id="p", location="us-central1", job=job).machine_choices()
    assert [c.name for c in choices] == [CHEAPEST_T4, "n1-standard-8+NVIDIA_TESLA_T4x1",
                                         "c3-standard-8"]  # fmt: skip
    assert choices[0].price_per_hour == pytest.approx(2 * 0.621)  # two replicas
    assert choices[1].price_per_hour == pytest.approx(2 * 0.8395)
    assert choices[2].price_per_hour is None  # not in the catalog: no price
    spot = VertexBackend(job=VertexJobConfig(machine_type="n1-standard-4", accelerator_type=
                         "NVIDIA_TESLA_T4", accelerator_count=1, spot=True))  # fmt: skip
    assert spot.machine_choices()[0].price_per_hour == pytest.approx(0.2173)


def test_a_default_machine_equal_to_a_fallback_is_tried_once():
    job = VertexJobConfig(machine_type="n1-standard-4", fallback_types=("n1-standard-4",))
    assert [c.name for c in VertexBackend(job=job).machine_choices()] == ["n1-standard-4"]


def test_an_attempts_machine_is_what_the_job_body_asks_for():
    job = VertexJobConfig(machine_type="n1-standard-4", accelerator_type="NVIDIA_TESLA_T4",
                          accelerator_count=1, image_uri="img")  # fmt: skip
    request = JobRequest(
        job_name="dag-task-0123456789-t1-a2", task_key="dag/run/task/-1",
        spec_uri="gs://bucket/r/spec.json", run_uri="gs://bucket/r",
        code_uri="gs://bucket/code/abc.zip", spec_sha256="f" * 64, code_sha256="abc",
    )  # fmt: skip
    on_next = job.on_machine("n1-standard-8+NVIDIA_TESLA_T4x2")
    body = build_job(request, {"args": [], "kwargs": {}}, on_next, "img", "p", "us-central1", b"")
    assert body["job_spec"]["worker_pool_specs"][0]["machine_spec"] == {
        "machine_type": "n1-standard-8",
        "accelerator_type": "NVIDIA_TESLA_T4",
        "accelerator_count": 2,
    }
    assert on_next.price_per_hour == pytest.approx(1.242)
    plain = job.on_machine("e2-standard-8")
    assert (plain.machine_type, plain.accelerator_type, plain.accelerator_count) == (
        "e2-standard-8", None, 0,
    )  # fmt: skip


def test_a_job_failed_with_code_8_is_a_capacity_failure_whatever_its_message():
    stockout = map_state("JOB_STATE_FAILED", "Resources are insufficient in region: x.", 8)
    assert stockout.state == "failed" and stockout.capacity
    assert stockout.reason == "JOB_STATE_FAILED: Resources are insufficient in region: x."
    assert map_state("JOB_STATE_FAILED", "The zone does not have enough resources", 8).capacity
    assert map_state("JOB_STATE_FAILED", "The following quota metrics exceed ...", 8).capacity
    # the step's own failure (a replica's non-zero exit status) is code 3: never a failover
    exited = map_state("JOB_STATE_FAILED", "The replica workerpool0-0 exited with 1", 3)
    assert exited.state == "failed" and not exited.capacity
    # the words alone are no code: not taken for a stockout
    assert not map_state("JOB_STATE_FAILED", "Resources are insufficient in region: x.").capacity
    assert not map_state("JOB_STATE_EXPIRED", "expired", 8).capacity
    assert not map_state("JOB_STATE_PAUSED", None, 8).capacity


def test_a_429_for_a_machine_quota_is_capacity_and_a_throttled_call_is_not():
    from google.api_core import exceptions

    assert machine_quota(exceptions.ResourceExhausted(QUOTA)) == (
        "custom_model_training_nvidia_t4_gpus"
    )
    assert machine_quota(exceptions.TooManyRequests(THROTTLED)) is None
    assert machine_quota(exceptions.BadRequest(QUOTA)) is None  # not a 429
    assert machine_quota(RuntimeError(QUOTA)) is None


def test_the_quota_metric_of_an_error_info_wins_over_the_message():
    from google.api_core import exceptions

    class WithInfo(exceptions.TooManyRequests):
        def __init__(self, message, metric):
            super().__init__(message)
            self._metric = metric

        @property
        def metadata(self):
            return {"quota_metric": self._metric}

    metric = "aiplatform.googleapis.com/custom_model_training_cpus"
    assert machine_quota(WithInfo("Quota exceeded.", metric)) == "custom_model_training_cpus"
    rate = "aiplatform.googleapis.com/resource_management_requests"
    assert machine_quota(WithInfo(QUOTA, rate)) is None


class _Jobs:
    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)
        self.calls = 0

    def create_custom_job(self, parent, custom_job):
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


class _Access:
    parent = "projects/p/locations/us-central1"

    def __init__(self, jobs):
        self.jobs = jobs


BODY = {
    "display_name": "dag-task-0123456789-t1",
    "job_spec": {"worker_pool_specs": [{"machine_spec": {
        "machine_type": "n1-standard-4", "accelerator_type": "NVIDIA_TESLA_T4",
        "accelerator_count": 1}}]},
}  # fmt: skip


def test_create_refused_for_a_machine_quota_raises_no_capacity_at_once():
    from google.api_core import exceptions

    backend = VertexBackend(project_id="p", location="us-central1")  # a triggerer's: no job
    backend.access = _Access(_Jobs(exceptions.ResourceExhausted(QUOTA)))
    with pytest.raises(NoCapacityError) as caught:
        backend._create(BODY, "try-1")
    assert caught.value.machine == CHEAPEST_T4
    assert "custom_model_training_nvidia_t4_gpus" in caught.value.reason
    assert backend.access.jobs.calls == 1  # not retried as throttling


def test_a_throttled_create_is_still_retried(monkeypatch):
    from google.api_core import exceptions

    monkeypatch.setattr("airflow_stepop.backends.vertex.backend.time.sleep", lambda s: None)
    backend = VertexBackend(project_id="p", location="us-central1")
    created = object()
    backend.access = _Access(_Jobs(exceptions.TooManyRequests(THROTTLED), created))
    assert backend._create(BODY, "try-1") is created
    assert backend.access.jobs.calls == 2
