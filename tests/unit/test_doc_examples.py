"""The docs are the contract: every DAG they show parses as a DAG file, as users paste it.

Parsing runs every parse-time check of the operators (arguments, resources, images), so an
example missing what a step needs fails here, not in a user's DAG processor. Running them is
the try-it blocks' job (docs/testing.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _dag_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in PAGES:
        for number, code in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S)):
            if "@dag" in code:
                blocks.append((f"{page.relative_to(ROOT)}#{number}", code))
    return blocks


BLOCKS = _dag_blocks()


def test_the_docs_show_a_dag_for_every_backend():
    shown = "".join(code for _, code in BLOCKS)
    for decorator in ("local_step", "sagemaker_step", "vertex_step", "azureml_step"):
        assert f"@task.{decorator}(" in shown


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_a_documented_dag_parses(where, code, tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "example_dag.py").write_text(code)
    bag = DagBag(dag_folder=str(tmp_path))
    assert not bag.import_errors, f"{where}: {bag.import_errors}"
    assert bag.dags, f"{where} defines no DAG"
