"""The README's Azure ML DAG, as a user pastes it, runs on the emulated cloud as it says."""

from __future__ import annotations

import importlib
import json
import sys

from tests.doc_blocks import python_block
from tests.integration.azureml.conftest import BUNDLES, jobs, xcoms


def test_the_readme_azureml_dag_runs_and_its_comments_hold(azure, ctl, tmp_path, monkeypatch):
    (tmp_path / "readme_azureml.py").write_text(python_block("README.md", "def on_azureml"))
    monkeypatch.syspath_prepend(str(tmp_path))
    readme = {
        "name": "readme",
        "classpath": BUNDLES[0]["classpath"],
        "kwargs": {"path": str(tmp_path)},
    }
    monkeypatch.setenv(
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([*BUNDLES, readme])
    )
    sys.modules.pop("readme_azureml", None)
    run = importlib.import_module("readme_azureml").on_azureml().test()
    assert run.state == "success"
    rows = xcoms(run)
    parts = [rows[("part", "return_value", k)] for k in range(4)]
    assert sum(parts) == rows[("total", "return_value", -1)] == 499500  # "499500 499500"
    assert rows[("prepare", "azureml_billing", -1)]["machine"] == "Standard_F2s_v2"
    part = rows[("part", "azureml_billing", 0)]
    assert (part["machine"], part["spot"]) == ("Standard_NC4as_T4_v3", True)
    assert len(jobs(azure["fake"], "on-azureml")) == 6  # prepare, total and four parts
