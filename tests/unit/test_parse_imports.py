"""A DAG file's parse loads only what its steps' arguments need.

The DAG processor parses every file over and over: a step that names no hardware and builds no
image must not load a cloud SDK, the docker client, the settings classes or the machine
catalogs (``bench/parse_cost.py`` measures what each costs).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

HEAVY = ("boto3", "botocore", "google", "azure", "docker", "numpy", "cloudpickle", "fsspec")

DAG = """
import json, sys
from airflow.sdk import dag, task
{extra_import}

before = set(sys.modules)

@dag(schedule=None)
def steps():
    @task.local_step({local})
    def local():
        return 1

    @task.sagemaker_step(image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1"{cloud})
    def on_sagemaker():
        return 1

    @task.azureml_step(image_uri="myregistry.azurecr.io/train:1.0"{cloud})
    def on_azureml():
        return 1

    @task.vertex_step(image_uri="us-docker.pkg.dev/my-project/train/image:1.0"{cloud})
    def on_vertex():
        return 1

    local() >> on_sagemaker() >> on_azureml() >> on_vertex()

steps()
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _loaded_by_parse(tmp_path, **fill: str) -> list[str]:
    path = tmp_path / "steps_dag.py"
    path.write_text(textwrap.dedent(DAG).format(**{"extra_import": "", "local": "", **fill}))
    run = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_steps_without_hardware_or_image_settings_load_no_settings_classes_or_catalog(tmp_path):
    loaded = _loaded_by_parse(tmp_path, cloud="")
    assert "airflow_stepop.operators.vertex" in loaded  # the parse did declare the steps
    ours = [name for name in loaded if name.startswith("airflow_stepop.")]
    assert "airflow_stepop.settings" not in ours
    assert [name for name in ours if name.startswith("airflow_stepop.catalog")] == []
    assert [name for name in loaded if name.split(".")[0] in HEAVY] == []


def test_steps_that_ask_for_hardware_load_the_settings_and_the_catalog(tmp_path):
    """The other side of the test above: the checks still run where there is a value."""
    loaded = _loaded_by_parse(
        tmp_path,
        extra_import="from airflow_stepop import ResourceSettings",
        local="resources=ResourceSettings(cpu_count=1)",
        cloud=", resources=ResourceSettings(gpu_count=1)",
    )
    assert {"airflow_stepop.catalog", "airflow_stepop.catalog.resolver"} <= set(loaded)
    assert [name for name in loaded if name.split(".")[0] in HEAVY] == []
