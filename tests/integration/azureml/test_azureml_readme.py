"""The README's Azure ML DAG, as a user pastes it, runs on the emulated cloud as it says."""

from __future__ import annotations

from tests.doc_blocks import run_dag_block
from tests.integration.azureml.conftest import BUNDLES, jobs, xcoms


def test_the_readme_azureml_dag_runs_and_its_comments_hold(azure, ctl, tmp_path, monkeypatch):
    run = run_dag_block("README.md", "on_azureml", tmp_path, monkeypatch, BUNDLES)
    assert run.state == "success"
    rows = xcoms(run)
    parts = [rows[("part", "return_value", k)] for k in range(4)]
    assert sum(parts) == rows[("total", "return_value", -1)] == 499500  # "499500 499500"
    assert rows[("prepare", "azureml_billing", -1)]["machine"] == "Standard_F2s_v2"
    part = rows[("part", "azureml_billing", 0)]
    assert (part["machine"], part["spot"]) == ("Standard_NC4as_T4_v3", True)
    assert len(jobs(azure["fake"], "on-azureml")) == 6  # prepare, total and four parts
