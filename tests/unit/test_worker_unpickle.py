"""On the worker, a step's pickled result is unpickled only by choice, and the result manifest
the job writes never chooses the connection the worker reads with (issue 39, point 2)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from airflow_stepop import ArtifactRef
from airflow_stepop.artifacts.ref import UnpicklingRefusedError
from airflow_stepop.backends.outcome import read_result
from airflow_stepop.runtime import values
from airflow_stepop.runtime.digest import WRITTEN_KIND, digest_of
from airflow_stepop.runtime.storage import Storage


class _Payload:
    """What a writer of the artifact root would store: unpickling it runs their code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _planted_pickle(tmp_path: Path) -> dict:
    """A pickle and a result manifest's record for it, both written by the bucket's writer:
    the digest matches, as they wrote both."""
    path = tmp_path / "run" / "outputs" / "return_value.pkl"
    path.parent.mkdir(parents=True)
    path.write_bytes(pickle.dumps(_Payload(tmp_path / "their-code-ran")))
    sha256, size = digest_of(path, WRITTEN_KIND)
    return {
        "uri": f"file://{path}",
        "sha256": sha256,
        "size": size,
        "materializer": "cloudpickle",
        "type_name": "dict",
        "digest_kind": WRITTEN_KIND,
    }


def test_a_plain_task_does_not_unpickle_a_steps_pickle_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW__STEPOP__WORKER_UNPICKLE", raising=False)
    ref = ArtifactRef.from_record(_planted_pickle(tmp_path))

    with pytest.raises(UnpicklingRefusedError) as refused:
        ref.load()

    assert not (tmp_path / "their-code-ran").exists()
    message = str(refused.value)
    assert "ref.load(allow_pickle=True)" in message
    assert "[stepop] worker_unpickle = True" in message
    assert "whoever may write the artifact root" in message


def test_allow_pickle_or_the_option_unpickles_it(tmp_path, monkeypatch):
    record = values.write_artifact({1, 2, 3}, f"file://{tmp_path}/out/value", Storage())
    ref = ArtifactRef.from_record(record)

    assert ref.load(allow_pickle=True) == {1, 2, 3}
    monkeypatch.setenv("AIRFLOW__STEPOP__WORKER_UNPICKLE", "True")
    assert ref.load() == {1, 2, 3}
    with pytest.raises(UnpicklingRefusedError):
        ref.load(allow_pickle=False)  # the argument wins over the option


def test_values_that_are_not_pickles_load_as_before(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW__STEPOP__WORKER_UNPICKLE", raising=False)
    record = values.write_artifact([1, 2] * 100, f"file://{tmp_path}/out/rows", Storage())

    assert ArtifactRef.from_record(record).load() == [1, 2] * 100


def test_a_connection_named_in_the_result_manifest_is_never_used(tmp_path):
    record = values.write_artifact([1, 2] * 100, f"file://{tmp_path}/run/outputs/rows", Storage())
    manifest = {"spec_version": 1, "outputs": {"ref": {**record, "conn_id": "their_conn"}}}
    (tmp_path / "run" / "result.json").write_text(json.dumps(manifest))

    ref = read_result({"run_uri": f"file://{tmp_path}/run"}, Storage(), "aws_default").value

    assert ref.conn_id == "aws_default"


def test_a_manifest_record_with_a_field_this_release_does_not_know_is_refused(tmp_path):
    record = values.write_artifact([1, 2] * 100, f"file://{tmp_path}/out/rows", Storage())

    with pytest.raises(ValueError, match=r"has the fields \['loader'\], which this"):
        ArtifactRef.from_record({**record, "loader": "os.system"})


def test_the_data_file_hint_knows_where_this_release_extracts_the_bundle():
    from airflow_stepop.backends.outcome import _hint

    error = {
        "type": "FileNotFoundError",
        "module": "builtins",
        "message": "[Errno 2] No such file or directory: '/tmp/airflow-stepop-cache-1000/code/"
        + "0" * 64
        + "/bundle/code/config.json'",
    }

    assert "Only .py files travel" in _hint(error)
