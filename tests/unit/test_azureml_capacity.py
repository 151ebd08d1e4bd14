"""Azure ML capacity failover: the sizes a step fails over to (parse), its machine choices,
the quota failure by Azure ML's code, and the warnings of a job held Queued."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from airflow_stepop import AzureMLStepOperator, DockerSettings
from airflow_stepop.backends.azureml import logs
from airflow_stepop.backends.azureml.backend import AzureMLBackend
from airflow_stepop.backends.azureml.config import AzureMLJobConfig
from airflow_stepop.backends.azureml.launch import CLUSTER_PROPERTY, map_status, short_of_quota
from airflow_stepop.settings import ResourceSettings, SettingsError

OWNER = "AzureMLStepOperator"
IMAGE = "myregistry.azurecr.io/train:1.0"
T4 = ResourceSettings(gpu_count=1, gpu_type="T4")
QUOTA = (
    "Job submission to AzureML Compute encountered an Exception with status code "
    "JobNodeCountExceedsCoreQuota, The specified subscription has a vCPU quota of 0 for "
    "Standard_NC4as_T4_v3 and is less than the requested job node count of 1. Talk to your "
    "Subscription Admin or refer to https://docs.microsoft.com/azure/machine-learning/"
    "how-to-manage-quotas#request-quota-increases to increase the vCPU quota"
)


def fit(n):
    return n


def config(**kwargs):
    return AzureMLJobConfig.from_arguments(OWNER, **{"image_uri": IMAGE, **kwargs})


def operator(**kwargs):
    return AzureMLStepOperator(task_id="fit", python_callable=fit, op_args=[1],
                               artifact_root="abfs://container/root",
                               docker=DockerSettings(parent_image="python:3.11-slim"),
                               **kwargs)  # fmt: skip


# --- parse: what a step fails over to, and what is refused ---------------------------------


def test_a_size_chosen_from_resources_fails_over_to_the_other_fitting_sizes_cheapest_first():
    step = operator(resources=T4)
    assert step.azureml.instance_type == "Standard_NC4as_T4_v3"
    assert step.azureml.fallback_types == (
        "Standard_NC8as_T4_v3", "Standard_NC16as_T4_v3", "Standard_NC64as_T4_v3",
    )  # fmt: skip


def test_a_named_size_fails_over_only_to_the_sizes_listed_spelt_as_azure_does():
    assert config(instance_type="Standard_NC6s_v3").fallback_types == ()
    job = config(instance_type="Standard_NC6s_v3", fallback_types=("standard_nc4as_t4_v3",))
    assert job.fallback_types == ("Standard_NC4as_T4_v3",)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"resources": T4, "fallback_types": ["Standard_D2s_v3"]},
            r"fallback_types\[0\]='Standard_D2s_v3' is .* which lacks what resources=",
        ),
        (
            {"resources": T4, "fallback_types": ["Standard_F4s_v2"]},
            r"fallback_types\[0\]='Standard_F4s_v2' is .* which lacks what resources=",
        ),
        ({"fallback_types": ["NC6s_v3"]}, r"fallback_types\[0\]='NC6s_v3' is not an Azure VM size"),
        (
            {"instance_type": "Standard_NC6s_v3", "fallback_types": ["standard_nc6s_v3"]},
            r"names 'Standard_NC6s_v3' twice \(or the step's own type\)",
        ),
        (
            {"compute": "gpu-cluster", "fallback_types": ["Standard_NC6s_v3"]},
            r"fallback_types=\['Standard_NC6s_v3'\] and compute='gpu-cluster': a cluster's VM "
            r"size is fixed",
        ),
    ],
)
def test_a_bad_fallback_fails_the_dag_import_naming_it(kwargs, message):
    with pytest.raises(SettingsError, match=message):
        operator(**kwargs)


def test_a_named_cluster_has_no_size_to_fail_over_to():
    step = operator(compute="gpu-cluster", resources=T4, capacity_attempts=3)
    assert step.azureml.fallback_types == ()
    job = step.azureml.completed(OWNER, dag_id="d", execution_timeout=None,
                                 artifact_root="abfs://container/root", image_uri=None)  # fmt: skip
    assert AzureMLBackend(job=job).machine_choices() == ()


# --- machine choices ------------------------------------------------------------------------


def test_machine_choices_are_the_chosen_size_then_the_fallbacks_priced_for_the_whole_job():
    job = config(resources=T4, instance_count=2)
    choices = AzureMLBackend(job=job).machine_choices()
    assert [c.name for c in choices] == [job.instance_type, *job.fallback_types]
    assert choices[0].price_per_hour == pytest.approx(2 * 0.526)
    spot = AzureMLBackend(job=config(resources=T4, spot=True)).machine_choices()
    assert spot[0].price_per_hour == pytest.approx(0.1052)  # the low-priority price


def test_the_default_size_fails_over_to_fallback_types_each_once():
    job = config(fallback_types=("Standard_DS3_v2", "Standard_D4s_v3"))
    job = job.completed(OWNER, dag_id="d", execution_timeout=None,
                        artifact_root="abfs://container/root", image_uri=None)  # fmt: skip
    names = [c.name for c in AzureMLBackend(job=job).machine_choices()]
    assert names == ["Standard_DS3_v2", "Standard_D4s_v3"]  # the default is DS3_v2


# --- the quota failure, by Azure ML's code --------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        {"code": "UserError", "message": QUOTA},
        {"code": "UserError", "message": "AzureMLCompute job failed. "
                                         "JobNodeCountExceedsCoreQuota: The specified ..."},
        {"code": "UserError", "message": "x",
         "innerError": {"code": "JobNodeCountExceedsCoreQuota"}},
        {"code": "UserError", "message": "x",
         "details": [{"code": "JobNodeCountExceedsCoreQuota", "message": "..."}]},
        {"code": "JobNodeCountExceedsCoreQuota", "message": "..."},
    ],
)  # fmt: skip
def test_a_job_failed_for_its_size_s_vcpu_quota_is_short_of_capacity(error):
    status = map_status("Failed", error)
    assert status.state == "failed" and status.capacity
    assert status.reason.startswith(f"{error['code']}: ")


@pytest.mark.parametrize(
    "error",
    [
        None,
        {"code": "UserError", "message": "Execution failed. User process exited with code 1"},
        {"code": "QuotaExceeded", "message": "not enough quota"},  # a word, not Azure ML's code
        {"code": "UserError", "message": "Please check log file 'user_logs/std_log.txt' for error "
         "details. Error: RuntimeError: status code JobNodeCountExceedsCoreQuota, said the user"},
    ],
)  # fmt: skip
def test_other_failures_are_not_short_of_capacity(error):
    assert not map_status("Failed", error).capacity
    assert not short_of_quota(error)


def test_the_quota_code_means_nothing_outside_a_failure():
    assert not map_status("Canceled", {"code": "UserError", "message": QUOTA}).capacity


class _Client:
    def __init__(self, resource, details):
        self.resource, self.details, self.details_reads = resource, details, 0

    async def get(self, path):
        return self.resource

    async def run_details(self, name):
        self.details_reads += 1
        return self.details


class _Backend(AzureMLBackend):
    workspace = SimpleNamespace(path="/ws")


def _final(own_properties):
    resource = {"name": "j", "properties": {"status": "Failed", "properties": own_properties,
                                            "resources": {"instanceCount": 1}}}  # fmt: skip
    backend = _Backend()
    backend._async = _Client(
        resource, {"error": {"error": {"code": "UserError", "message": QUOTA}}}
    )
    return asyncio.run(backend.astatus({"job_id": "j"}))


def test_a_serverless_job_short_of_quota_fails_over_and_a_cluster_s_job_fails():
    assert _final({"stepop_vm_size": "Standard_NC4as_T4_v3"}).capacity
    on_cluster = _final({"stepop_vm_size": "Standard_NC6s_v3", CLUSTER_PROPERTY: "gpu-cluster"})
    assert on_cluster.state == "failed" and not on_cluster.capacity
    assert "JobNodeCountExceedsCoreQuota" in on_cluster.reason


# --- a job held Queued: Azure ML's warnings in the task log ---------------------------------


class _Bucket:
    def __init__(self):
        self.taken = 0

    def try_acquire(self):
        self.taken += 1
        return True


STOCKOUT = (
    "Run requested 1 node(s). Instances of the specified VM size are not currently available."
)


def test_a_queued_job_s_warnings_are_relayed_once_it_has_waited(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(logs.time, "monotonic", lambda: clock[0])
    client = _Client({}, {"warnings": []})
    bucket = _Bucket()
    relay = logs.LogRelay()

    def read(cursor):
        return asyncio.run(relay.read("j", "Queued", cursor, client=lambda: client,
                                      limiter=lambda: bucket))  # fmt: skip

    lines, cursor = read(None)
    assert lines == [] and client.details_reads == 0  # a short wait costs no call
    clock[0] += logs.QUEUED_WARNINGS_AFTER
    lines, cursor = read(cursor)
    assert lines == [] and client.details_reads == 1 and cursor["warnings"] == 0
    client.details = {"warnings": [{"source": "Compute", "message": STOCKOUT}]}
    clock[0] += 1
    assert read(cursor) == ([], cursor) and client.details_reads == 1  # not due yet
    clock[0] += logs.LOG_FILES_INTERVAL
    lines, cursor = read(cursor)
    assert lines == [f"Azure ML: {STOCKOUT}"] and cursor["warnings"] == 1
    clock[0] += logs.LOG_FILES_INTERVAL
    lines, cursor = read(cursor)
    assert lines == [] and client.details_reads == 3  # each warning once
    assert bucket.taken == 3
