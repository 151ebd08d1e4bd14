"""The README's Vertex AI DAG, as a user pastes it, runs on the emulated cloud as it says."""

from __future__ import annotations

from tests.doc_blocks import run_dag_block
from tests.integration.vertex.conftest import BUNDLES, xcoms

# The README's image (PyTorch's) cannot be pulled here: the stack's base image stands in for it,
# with what the README's comment says its image brings (python3, numpy). Any other image would
# run in a container (cloud.runner), whose pull of PyTorch's image would fail.
README_IMAGE = "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"


def test_the_readme_vertex_dag_runs_and_its_comments_hold(gcp, ctl, tmp_path, monkeypatch):
    base = f"{gcp['registry']}/stepop-base/python:3.11-bookworm"
    run = run_dag_block(
        "README.md", "on_vertex", tmp_path, monkeypatch, BUNDLES, {README_IMAGE: base}
    )
    assert run.state == "success"
    rows = xcoms(run)
    parts = [rows[("part", "return_value", k)] for k in range(4)]
    assert sum(parts) == rows[("total", "return_value", -1)] == 499500  # "the same sum twice"
    assert rows[("prepare", "vertex_billing", -1)]["machine_type"] == "n1-highmem-2"
    part = rows[("part", "vertex_billing", 0)]
    assert (part["machine_type"], part["accelerator_count"], part["spot"]) == (
        "g2-standard-4",
        1,
        True,
    )
    assert ctl.counters()["CreateCustomJob"] == 6  # prepare, total and four parts
