"""The README's Vertex AI DAG, as a user pastes it, runs on the emulated cloud as it says."""

from __future__ import annotations

import importlib
import json
import sys

from tests.doc_blocks import python_block
from tests.integration.vertex.conftest import BUNDLES, xcoms


def test_the_readme_vertex_dag_runs_and_its_comments_hold(gcp, ctl, tmp_path, monkeypatch):
    (tmp_path / "readme_vertex.py").write_text(python_block("README.md", "def on_vertex"))
    monkeypatch.syspath_prepend(str(tmp_path))
    readme = {
        "name": "readme",
        "classpath": BUNDLES[0]["classpath"],
        "kwargs": {"path": str(tmp_path)},
    }
    monkeypatch.setenv(
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([*BUNDLES, readme])
    )
    sys.modules.pop("readme_vertex", None)
    run = importlib.import_module("readme_vertex").on_vertex().test()
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
