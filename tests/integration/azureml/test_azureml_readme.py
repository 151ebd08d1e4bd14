"""The README's Azure ML DAG, as a user pastes it, runs on the emulated cloud as it says."""

from __future__ import annotations

from tests.doc_blocks import run_dag_block
from tests.integration.azureml.conftest import BUNDLES, jobs, xcoms

# The README's image (PyTorch's) cannot be pulled here: the stack's base image stands in for it,
# with what the README's comment says its image brings (python3, numpy). Any other image would
# run in a container (cloud.runner), whose pull of PyTorch's image would fail.
README_IMAGE = "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"


def test_the_readme_azureml_dag_runs_and_its_comments_hold(azure, ctl, tmp_path, monkeypatch):
    base = (
        f"{azure['env'].get('STEPOP_REGISTRY', '127.0.0.1:5000')}/stepop-base/python:3.11-bookworm"
    )
    run = run_dag_block(
        "README.md", "on_azureml", tmp_path, monkeypatch, BUNDLES, {README_IMAGE: base}
    )
    assert run.state == "success"
    rows = xcoms(run)
    parts = [rows[("part", "return_value", k)] for k in range(4)]
    assert sum(parts) == rows[("total", "return_value", -1)] == 499500  # "499500 499500"
    assert rows[("prepare", "azureml_billing", -1)]["machine"] == "Standard_F2s_v2"
    part = rows[("part", "azureml_billing", 0)]
    assert (part["machine"], part["spot"]) == ("Standard_NC4as_T4_v3", True)
    assert len(jobs(azure["fake"], "on-azureml")) == 6  # prepare, total and four parts
