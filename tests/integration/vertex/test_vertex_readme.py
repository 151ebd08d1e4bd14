"""The README's Vertex AI DAG, as a user pastes it, runs on the emulated cloud as it says."""

from __future__ import annotations

from tests.doc_blocks import run_dag_block
from tests.integration.vertex.conftest import BUNDLES, xcoms


def test_the_readme_vertex_dag_runs_and_its_comments_hold(gcp, ctl, tmp_path, monkeypatch):
    run = run_dag_block("README.md", "on_vertex", tmp_path, monkeypatch, BUNDLES)
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
