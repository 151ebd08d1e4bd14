"""The runtime runs a staged step in a fresh interpreter with no Airflow (and no numpy)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

from airflow_stepop.packaging.staging import StepIdentity, stage_step
from airflow_stepop.runtime.storage import Storage

STEP = StepIdentity("dag", "manual__2026-01-01T00:00:00+00:00", "task", -1, 1)


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A venv with nothing installed: no Airflow, no numpy, no cloudpickle, no fsspec."""
    home = tmp_path_factory.mktemp("bare-venv")
    venv.create(home, with_pip=False)
    python = str(home / "bin" / "python")
    probe = "import importlib.util as u; print([u.find_spec(m) is None for m in "
    probe += "('airflow', 'numpy', 'cloudpickle', 'fsspec')])"
    assert subprocess.run([python, "-c", probe], capture_output=True, text=True).stdout.strip() == (
        "[True, True, True, True]"
    )
    return python


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    (code / "wordcount.py").write_text(
        textwrap.dedent(
            """
            import collections

            def count(text, top=2):
                return dict(collections.Counter(text.split()).most_common(top))

            def repeat(word, n):
                return [word] * n

            def explode(reason):
                raise ValueError(f"bad input: {reason}")
            """
        )
    )
    monkeypatch.syspath_prepend(str(code))
    sys.modules.pop("wordcount", None)
    import wordcount

    yield wordcount
    sys.modules.pop("wordcount", None)


def _run(python: str, staged, bundle_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-m", "airflow_stepop.runtime", staged.spec_uri],
        env={"PYTHONPATH": str(bundle_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_runtime_runs_a_step_without_airflow(bare_python, user_module, tmp_path):
    storage = Storage()
    staged = stage_step(
        user_module.count,
        ["a b a c a b"],
        {"top": 2},
        root=f"file://{tmp_path}/root",
        step=STEP,
        storage=storage,
    )
    result = _run(bare_python, staged, storage.local_path(staged.code_uri))
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = storage.read_json(staged.run_uri + "/result.json")
    assert manifest["outputs"] == {"inline": {"a": 3, "b": 2}}


def test_a_raising_step_writes_its_error_document(bare_python, user_module, tmp_path):
    storage = Storage()
    staged = stage_step(
        user_module.explode,
        ["42"],
        {},
        root=f"file://{tmp_path}/root",
        step=STEP,
        storage=storage,
    )
    result = _run(bare_python, staged, storage.local_path(staged.code_uri))
    assert result.returncode == 1
    error = storage.read_json(staged.run_uri + "/error.json")
    assert error["type"] == "ValueError"
    assert error["message"] == "bad input: 42"
    assert "def explode" in error["traceback"] or "explode" in error["traceback"]
    assert not storage.exists(staged.run_uri + "/result.json")


def test_a_pickled_step_on_another_python_is_a_clear_error(user_module, tmp_path):
    storage = Storage()
    offset = 1
    staged = stage_step(
        lambda x: x + offset,
        [1],
        {},
        root=f"file://{tmp_path}/root",
        step=STEP,
        storage=storage,
    )
    spec_path = storage.local_path(staged.spec_uri)
    spec = json.loads(spec_path.read_text())
    spec["python"] = "3.9"  # as if packaged by a Python 3.9 worker
    spec_path.write_text(json.dumps(spec))
    result = _run(sys.executable, staged, storage.local_path(staged.code_uri))
    assert result.returncode == 1
    error = storage.read_json(staged.run_uri + "/error.json")
    assert error["type"] == "PythonVersionMismatchError"
    assert "Python 3.9" in error["message"] and "parent_image" in error["message"]


def test_a_modified_code_bundle_is_refused(bare_python, user_module, tmp_path):
    storage = Storage()
    staged = stage_step(
        user_module.count, ["a"], {}, root=f"file://{tmp_path}/root", step=STEP, storage=storage
    )
    bundle = storage.local_path(staged.code_uri)
    tampered = tmp_path / "bundle-copy.zip"
    tampered.write_bytes(bundle.read_bytes())  # the runtime package still imports from here
    with open(bundle, "ab") as handle:
        handle.write(b"appended")
    result = _run(bare_python, staged, tampered)
    assert result.returncode == 1
    error = storage.read_json(staged.run_uri + "/error.json")
    assert error["type"] == "CodeBundleError"
    assert "modified after the step was submitted" in error["message"]


def test_mapped_prefixes_and_output_uri_give_results_their_final_uris(
    bare_python, user_module, tmp_path
):
    """How services that stage storage into the container run a step: the job sees local
    directories only, yet its result records the object-store URIs the service uploads to."""
    storage = Storage()
    staged = stage_step(
        user_module.repeat,
        ["x", 1000],
        {},
        root=f"file://{tmp_path}/root",
        step=STEP,
        storage=storage,
        inline_limit=100,
    )
    uploaded = tmp_path / "service-output-dir"  # e.g. /opt/ml/model, uploaded by the service
    output_uri = "s3://bucket/jobs/job-1/output/model"
    result = subprocess.run(
        [bare_python, "-m", "airflow_stepop.runtime", staged.spec_uri, "--output-uri", output_uri],
        env={
            "PYTHONPATH": str(storage.local_path(staged.code_uri)),
            "STEPOP_PATH_MAP": json.dumps({output_uri: str(uploaded)}),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    manifest = json.loads((uploaded / "result.json").read_text())
    ref = manifest["outputs"]["ref"]
    assert ref["uri"] == f"{output_uri}/outputs/return_value.json"
    assert (uploaded / "outputs" / "return_value.json").exists()
    assert not storage.exists(staged.run_uri + "/result.json")
