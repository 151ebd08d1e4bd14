"""docs/kubernetes.md's DAG, as a user pastes it, runs on the emulated cluster as it says."""

from __future__ import annotations

from tests.doc_blocks import run_dag_block
from tests.integration.kubernetes.conftest import BUNDLES, jobs_of, xcoms

# The page's image (PyTorch's) cannot be pulled here: the stack's base image stands in for it,
# with what the page's comment says its image brings (python3, numpy).
PAGE_IMAGE = "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"
BASE = "127.0.0.1:5000/stepop-base/python:3.11-bookworm"


def test_the_pages_dag_runs_and_its_comments_hold(k8s, tmp_path, monkeypatch):
    run = run_dag_block(
        "docs/kubernetes.md", "on_kubernetes", tmp_path, monkeypatch, BUNDLES, {PAGE_IMAGE: BASE}
    )
    assert run.state == "success"
    rows = xcoms(run)
    parts = [rows[("part", "return_value", k)] for k in range(4)]
    assert sum(parts) == rows[("total", "return_value", -1)] == 499500  # "the same sum twice"
    jobs = {j["metadata"]["labels"]["stepop.io/task-id"]: j for j in jobs_of(run)}
    pod = jobs["part"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert "NVIDIA-A100-SXM4-80GB" in term["matchExpressions"][0]["values"]  # "on an A100 node"
