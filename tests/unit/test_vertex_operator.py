"""VertexStepOperator's arguments: each wrong value is refused at DAG parse time, by name."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from airflow.sdk import DAG

from airflow_stepop import DockerSettings, ResourceSettings, VertexStepOperator
from airflow_stepop.catalog import NoFittingMachineError
from airflow_stepop.settings import SettingsError

IMAGE = "us-central1-docker.pkg.dev/my-project/train/env:1"


def _op(**kwargs):
    kwargs.setdefault("image_uri", IMAGE)
    with DAG("vx_args", schedule=None):
        return VertexStepOperator(task_id="t", python_callable=dict, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"gcp_conn_id": "bad id"}, ["gcp_conn_id='bad id'", "google_cloud_default"]),
        ({"project_id": "My_Project"}, ["project_id='My_Project'", "my-project"]),
        ({"location": "Mars"}, ["location='Mars'", "us-central1"]),
        ({"machine_type": "N1 standard"}, ["machine_type='N1 standard'", "n1-standard-8"]),
        (
            {"machine_type": "n1-standard-8", "accelerator_type": "T4"},
            ["accelerator_type='T4'", "NVIDIA_TESLA_T4"],
        ),
        (
            {"accelerator_type": "NVIDIA_TESLA_T4"},
            ["accelerator_type='NVIDIA_TESLA_T4'", "machine_type="],
        ),
        (
            {"accelerator_type": "NVIDIA_TESLA_T4", "resources": ResourceSettings(gpu_count=1)},
            ["comes with machine_type= only: resources= picks", "ResourceSettings(gpu_type=...)"],
        ),
        (
            {"machine_type": "n1-standard-8", "accelerator_count": 2},
            ["accelerator_count=2", "accelerator_type="],
        ),
        (
            {"machine_type": "a2-highgpu-1g", "accelerator_count": 4},
            ["machine_type='a2-highgpu-1g' comes with 1 x NVIDIA_TESLA_A100"],
        ),
        (
            {"machine_type": "e2-standard-4", "accelerator_type": "NVIDIA_TESLA_T4"},
            ["cannot be attached", "n1"],
        ),
        (
            {"machine_type": "a2-highgpu-1g", "accelerator_type": "NVIDIA_TESLA_T4"},
            ["1 x NVIDIA_TESLA_A100"],
        ),
        (  # a GPU machine type the catalog lacks: Vertex needs its accelerators named
            {"machine_type": "a3-megagpu-8g"},
            [
                "machine_type='a3-megagpu-8g' is not in the catalog",
                "'NVIDIA_H100_MEGA_80GB'",
                "accelerator_count=8",
            ],
        ),  # fmt: skip
        (
            {"machine_type": "a3-ultragpu-8g", "accelerator_type": "NVIDIA_L4"},
            ["'NVIDIA_L4' does not come with machine_type='a3-ultragpu-8g'", "'NVIDIA_H200_141GB'"],
        ),
        (
            {"machine_type": "g4-standard-48", "accelerator_type": "NVIDIA_RTX_PRO_6000"},
            ["machine_type='g4-standard-48' needs accelerator_count="],
        ),
        (  # L4 and H100 come only with their machine types, never on n1
            {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_L4"},
            [
                "'NVIDIA_L4' cannot be attached to machine_type='n1-standard-8'",
                "g2",
                "machine_type='g2-standard-4'",
            ],
        ),  # fmt: skip
        (
            {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_H100_80GB"},
            ["cannot be attached", "machine_type='a3-highgpu-1g'"],
        ),
        (
            {
                "machine_type": "n1-standard-8",
                "accelerator_type": "NVIDIA_TESLA_T4",
                "accelerator_count": 0,
            },
            ["accelerator_count=0", "1 to 16"],
        ),
        (
            {
                "machine_type": "n1-standard-8",
                "accelerator_type": "NVIDIA_TESLA_T4",
                "accelerator_count": 3,
            },
            ["accelerator_count=3", "NVIDIA_TESLA_T4", "1, 2, 4"],
        ),
        ({"replica_count": 0}, ["replica_count=0", "1 to 100"]),
        ({"replica_count": True}, ["replica_count=True"]),
        ({"boot_disk_size_gb": 50}, ["boot_disk_size_gb=50", "100 to 64000"]),
        ({"max_runtime": "2h"}, ["max_runtime='2h'", "timedelta"]),
        ({"max_runtime": timedelta(days=40)}, ["max_runtime=", "1..2592000"]),
        ({"spot": "yes"}, ["spot='yes'", "True or False"]),
        ({"restart_on_worker_restart": 1}, ["restart_on_worker_restart=1", "True or False"]),
        ({"service_account": "trainer"}, ["service_account='trainer'", "iam.gserviceaccount.com"]),
        ({"network": "my-vpc"}, ["network='my-vpc'", "projects/123456789012/global/networks/"]),
        ({"encryption_key": "alias/k"}, ["encryption_key='alias/k'", "cryptoKeys"]),
        ({"labels": {"Team": "ml"}}, ["labels has the key 'Team'", "lowercase"]),
        ({"labels": {"team": "ML"}}, ["labels['team']='ML'", "lowercase"]),
        ({"labels": ["team"]}, ["labels=['team']", "dict"]),
        ({"labels": {"stepop_task": "x"}}, ["labels has the key 'stepop_task', which is ours"]),
        ({"labels": {"stepop": "mine"}}, ["key 'stepop', which is ours", "'my_stepop'"]),
        ({"labels": {"airflow_dag_id": "d"}}, ["key 'airflow_dag_id', which is ours"]),
        (
            {"labels": {f"k{i}": "v" for i in range(58)}},
            ["labels has 58 entries", "at most 57", "64 labels per job"],
        ),
        ({"image_uri": "not an image!"}, ["image_uri='not an image!'", "docker.pkg.dev"]),
        ({"image_uri": None}, ["needs an image", "DockerSettings"]),
        ({"image_repository": "repo:tag"}, ["image_repository='repo:tag'"]),
        (
            {"impersonation_chain": "deployer"},
            ["impersonation_chain has 'deployer'", "iam.gserviceaccount.com"],
        ),
        (
            {"persistent_resource_id": "Warm Pool"},
            ["persistent_resource_id='Warm Pool'", "stepop-warm-pool"],
        ),
        ({"experiment": "Churn Model"}, ["experiment='Churn Model'", "churn-model"]),
        (
            {"experiment": "churn-model"},
            ["experiment='churn-model' needs service_account=", "iam.gserviceaccount.com"],
        ),
        ({"artifact_root": "s3://bucket/x"}, ["artifact_root='s3://bucket/x'", "gs://"]),
        ({"environment": {f"V{i}": "x" for i in range(97)}}, ["environment has 97 entries", "96"]),
    ],
)
def test_a_wrong_argument_is_refused_by_name(kwargs, words):
    with pytest.raises(SettingsError) as err:
        _op(**kwargs)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


@pytest.mark.parametrize(
    ("machine", "accelerator", "count", "expect"),
    [
        ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8, 8),
        ("a3-ultragpu-8g", "NVIDIA_H200_141GB", None, 8),  # the count from the name
        ("a4-highgpu-8g", "NVIDIA_B200", None, 8),
        ("a4x-highgpu-4g", "NVIDIA_GB200", 4, 4),
        ("g4-standard-48", "NVIDIA_RTX_PRO_6000", 1, 1),
        ("cloud-tpu", "TPU_V3", 8, 8),
        ("ct5lp-hightpu-4t", "TPU_V5_LITEPOD", None, 4),
    ],
)
def test_a_gpu_machine_type_the_catalog_lacks_is_taken_as_given_with_its_accelerators(
    machine, accelerator, count, expect
):
    job = _op(machine_type=machine, accelerator_type=accelerator, accelerator_count=count)
    config = job.job_config
    assert (config.machine_type, config.accelerator_type, config.accelerator_count) == (
        machine, accelerator, expect,
    )  # fmt: skip
    assert config.price_per_hour is None  # not in the catalog: no price, no estimate


def test_every_vertex_accelerator_has_a_machine_type_to_go_with():
    from airflow_stepop.backends.vertex.machines import (
        ACCELERATORS,
        BUNDLED_FAMILIES,
        N1_GPU_COUNTS,
        bundled_family,
        split_machine,
    )  # fmt: skip
    from airflow_stepop.catalog import load

    bundled = {kind for kinds in BUNDLED_FAMILIES.values() for kind in kinds}
    assert set(ACCELERATORS) == bundled | set(N1_GPU_COUNTS)
    for row in load("airflow_stepop.backends.vertex").types:  # the catalog obeys the same rules
        machine, kind, _ = split_machine(row.name)
        if kind and machine.startswith("n1-"):
            assert kind in N1_GPU_COUNTS, row.name
        elif kind:
            assert kind in BUNDLED_FAMILIES[bundled_family(machine)], row.name


def test_resources_resolve_to_the_cheapest_legal_machine_at_parse_time():
    op = _op(resources=ResourceSettings(gpu_type="T4"))
    job = op.job_config
    assert (job.machine_type, job.accelerator_type, job.accelerator_count) == (
        "n1-standard-4", "NVIDIA_TESLA_T4", 1,
    )  # fmt: skip
    assert (
        _op(resources=ResourceSettings(gpu_type="A100")).job_config.machine_type == "a2-highgpu-1g"
    )
    assert (
        _op(resources=ResourceSettings(cpu_count=2, memory="4GiB")).job_config.machine
        == "n1-highmem-2"
    )


def test_spot_jobs_are_priced_at_the_spot_rate():
    on_demand = _op(machine_type="g2-standard-8").job_config
    spot = _op(machine_type="g2-standard-8", spot=True).job_config
    assert on_demand.accelerator_type == "NVIDIA_L4" and on_demand.accelerator_count == 1
    assert 0 < spot.price_per_hour < on_demand.price_per_hour


def test_a_request_nothing_fits_names_the_three_closest_machines():
    with pytest.raises(NoFittingMachineError) as err:
        _op(resources=ResourceSettings(gpu_count=16, gpu_type="H100"))
    message = str(err.value)
    assert (
        "VertexStepOperator(task_id='t').resources=ResourceSettings(gpu_count=16, gpu_type='H100')"
        in message
    )
    closest = re.search(r"Closest: (.*)\. Ask", message).group(1).split("; ")
    assert len(closest) == 3 and closest[0].startswith("a3-highgpu-8g+NVIDIA_H100_80GBx8")
    assert "more machines with replica_count" in message and "machine_type=" in message
    assert "instance_count" not in message


def test_a_bundled_gpu_machine_lacking_the_asked_gpu_is_refused_as_written():
    """The catalog's row is 'a2-highgpu-1g+NVIDIA_TESLA_A100x1'; the user wrote the machine."""
    with pytest.raises(NoFittingMachineError) as err:
        _op(machine_type="a2-highgpu-1g", resources=ResourceSettings(gpu_type="T4"))
    message = str(err.value)
    assert message.startswith(
        "VertexStepOperator(task_id='t').machine_type='a2-highgpu-1g' is a2-highgpu-1g"
    )
    assert "1 x A100" in message and "Drop machine_type" in message


@pytest.mark.parametrize(
    ("default", "machine"),
    [
        ("n1-standard-4", ("n1-standard-4", None, 0)),
        ("g2-standard-4", ("g2-standard-4", "NVIDIA_L4", 1)),  # its GPU filled in
        ("n1-standard-8+NVIDIA_TESLA_T4x2", ("n1-standard-8", "NVIDIA_TESLA_T4", 2)),
        ("a3-megagpu-8g+NVIDIA_H100_MEGA_80GBx8", ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8)),
    ],
)
def test_the_default_machine_is_read_when_the_task_runs_gpus_filled_in_as_for_machine_type(
    default, machine, monkeypatch
):
    monkeypatch.setenv("AIRFLOW__STEPOP__VERTEX_ARTIFACT_ROOT", "gs://bucket/stepop")
    step = _op()  # parsed before the option is set: a worker's configuration is what counts
    assert step.job_config.machine_type is None
    monkeypatch.setenv("AIRFLOW__STEPOP__VERTEX_DEFAULT_MACHINE_TYPE", default)
    job = step.make_backend().job
    assert (job.machine_type, job.accelerator_type, job.accelerator_count) == machine
    assert job.image_uri == IMAGE


@pytest.mark.parametrize(
    ("default", "words"),
    [
        ("a3-megagpu-8g", ["is not in the catalog", "'a3-megagpu-8g+KINDx8'", "NVIDIA_H200"]),
        ("n1-standard-8+T4x1", ["names 'T4', which is not a Vertex accelerator type"]),
        ("n1-standard-8+NVIDIA_TESLA_T4", ["is not a Vertex machine type", "n1-standard-4"]),
    ],
)
def test_a_default_machine_vertex_would_refuse_fails_the_task_naming_the_option(
    default, words, monkeypatch
):
    monkeypatch.setenv("AIRFLOW__STEPOP__VERTEX_ARTIFACT_ROOT", "gs://bucket/stepop")
    monkeypatch.setenv("AIRFLOW__STEPOP__VERTEX_DEFAULT_MACHINE_TYPE", default)
    step = _op()
    with pytest.raises(SettingsError) as err:
        step.make_backend()
    message = str(err.value)
    assert message.startswith(f"[stepop] vertex_default_machine_type={default!r}")
    for word in words:
        assert word in message


def test_max_runtime_defaults_to_execution_timeout_plus_a_grace_then_seven_days():
    # 5 minutes past the deadline: the trigger cancels the job first (AirflowTaskTimeout), and
    # scheduling.timeout only ends a job nobody watches
    assert _op(execution_timeout=timedelta(minutes=30)).job_config.max_runtime_s == 2100
    assert _op(execution_timeout=timedelta(days=30)).job_config.max_runtime_s == 30 * 24 * 3600
    assert _op().job_config.max_runtime_s == 7 * 24 * 3600
    assert _op(max_runtime=timedelta(hours=2)).job_config.max_runtime_s == 7200
    own = _op(execution_timeout=timedelta(hours=3), max_runtime=timedelta(hours=2))
    assert own.job_config.max_runtime_s == 7200  # the user's own limit, as given


def test_templated_image_uri_is_checked_at_run_time():
    op = _op(image_uri="{{ var.value.train_image }}")
    assert op.image_uri == "{{ var.value.train_image }}"


def test_docker_settings_alone_are_enough():
    op = _op(image_uri=None, docker=DockerSettings(parent_image="python:3.11-slim"))
    assert op.job_config.image_uri is None


def test_the_decorator_is_registered_and_builds_the_operator():
    from airflow.sdk import task

    from airflow_stepop import get_provider_info

    names = {d["name"] for d in get_provider_info()["task-decorators"]}
    assert "vertex_step" in names
    with DAG("vx_decorated", schedule=None) as dag:

        @task.vertex_step(image_uri=IMAGE, machine_type="g2-standard-8")
        def fit(x: int):
            return x

        fit(1)
    (op,) = dag.tasks
    assert isinstance(op, VertexStepOperator) and op.job_config.accelerator_type == "NVIDIA_L4"


def test_links_name_the_job_its_logs_and_the_experiments_runs():
    from airflow_stepop.backends.vertex.backend import VertexBackend

    handle = {"project": "p", "location": "europe-west4", "job_id": "123",
              "display_name": "d-t1", "experiment": "churn"}  # fmt: skip
    links = VertexBackend().links(handle)
    assert links["job"] == (
        "https://console.cloud.google.com/vertex-ai/locations/europe-west4/training/123/cpu?project=p"
    )
    assert "resource.labels.job_id%3D%22123%22" in links["logs"]
    # the runs of the experiment: Vertex names the job's run itself, so no run page is guessed
    assert links["experiment"].endswith("/locations/europe-west4/experiments/churn/runs?project=p")
    assert "experiment" not in VertexBackend().links({**handle, "experiment": None})


def test_a_link_the_task_never_stored_is_not_looked_up():
    from airflow_stepop.links.job import StepExperimentLink, StepJobLink

    operator = VertexStepOperator(task_id="t", python_callable=dict, image_uri=IMAGE)

    def lookup_fails(**kwargs):
        raise AssertionError("looked up")

    key = object()
    operator.stored_link_kinds = frozenset({"job"})  # this process stored only the job's link
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("airflow.sdk.execution_time.xcom.XCom.get_value", lookup_fails)
        assert StepExperimentLink().get_link(operator, ti_key=key) == ""
        with pytest.raises(AssertionError, match="looked up"):
            StepJobLink().get_link(operator, ti_key=key)
        operator.stored_link_kinds = None  # another process (the UI): ask the store
        with pytest.raises(AssertionError, match="looked up"):
            StepExperimentLink().get_link(operator, ti_key=key)


def test_the_examples_training_job_gets_its_deadline_plus_five_minutes(monkeypatch):
    """dags_examples/vertex_train.py says so of its train step's scheduling.timeout."""
    import importlib.util
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "dags_examples"
    monkeypatch.syspath_prepend(str(examples))
    spec = importlib.util.spec_from_file_location(
        "vertex_train_example", examples / "vertex_train.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag_object = module.stepop_vertex_train()
    train = dag_object.get_task("train")
    assert train.execution_timeout == timedelta(hours=2)
    assert train.job_config.max_runtime_s == 2 * 3600 + 5 * 60
