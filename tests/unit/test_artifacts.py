"""Materializers and value nodes: what a step returns comes back equal, and verified."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pandas as pd
import pytest

from airflow_stepop import ArtifactRef
from airflow_stepop.artifacts.ref import as_record
from airflow_stepop.runtime import values
from airflow_stepop.runtime.materializers import NoMaterializerError, is_strict_json
from airflow_stepop.runtime.storage import Storage


@pytest.fixture
def storage() -> Storage:
    return Storage()


def _roundtrip(value, tmp_path, storage):
    ref = values.write_artifact(value, f"file://{tmp_path}/out/value", storage)
    return ref, values.read_artifact(ref, storage, tmp_path / "cache")


@pytest.mark.parametrize(
    ("value", "materializer"),
    [
        ({"a": [1, 2.5, None, True]}, "json"),
        ("héllo" * 10, "str"),
        (b"\x00\x01binary", "bytes"),
        ((1, "tuple", {2, 3}), "cloudpickle"),
    ],
)
def test_builtins_roundtrip(value, materializer, tmp_path, storage):
    ref, back = _roundtrip(value, tmp_path, storage)
    assert ref["materializer"] == materializer
    assert back == value


def test_numpy_arrays_are_npy_files(tmp_path, storage):
    array = np.random.default_rng(0).normal(size=(100, 7)).astype("float32")
    ref, back = _roundtrip(array, tmp_path, storage)
    assert ref["materializer"] == "numpy" and ref["uri"].endswith(".npy")
    assert ref["type_name"] == "numpy.ndarray"
    np.testing.assert_array_equal(back, array)
    assert back.dtype == np.float32


def test_dataframes_are_parquet(tmp_path, storage):
    frame = pd.DataFrame({"x": [1, 2, 3], "y": ["a", "b", "c"]})
    ref, back = _roundtrip(frame, tmp_path, storage)
    assert ref["materializer"] == "pandas-parquet" and ref["uri"].endswith(".parquet")
    pd.testing.assert_frame_equal(back, frame)


def test_a_returned_directory_travels_as_a_tree(tmp_path, storage):
    model = tmp_path / "model"
    (model / "weights").mkdir(parents=True)
    (model / "config.json").write_text('{"layers": 2}')
    (model / "weights" / "w.bin").write_bytes(b"\x01" * 1000)
    ref, back = _roundtrip(model, tmp_path, storage)
    assert ref["materializer"] == "path"
    assert isinstance(back, pathlib.Path) and back.is_dir()
    assert (back / "weights" / "w.bin").read_bytes() == b"\x01" * 1000
    assert ref["size"] == 1000 + len('{"layers": 2}')


@pytest.mark.parametrize("root", ["file://{tmp}/out", "memory://stepop-test-{tmp.name}"])
def test_a_returned_file_comes_back_under_its_own_name(root, tmp_path, storage):
    """Some loaders go by the suffix (Keras refuses a model file without ``.keras``)."""
    model = tmp_path / "model.keras"
    model.write_bytes(b"weights")
    ref = values.write_artifact(model, root.format(tmp=tmp_path) + "/return_value", storage)
    back = values.read_artifact(ref, storage, tmp_path / "cache")
    assert ref["uri"].endswith("/return_value/model.keras")
    assert back.name == "model.keras" and back.read_bytes() == b"weights"


def test_a_returned_file_name_a_uri_would_misread_is_made_safe(tmp_path, storage):
    model = tmp_path / "my model#1?.bin"
    model.write_bytes(b"w")
    ref = values.write_artifact(model, f"file://{tmp_path}/out/return_value", storage)
    assert ref["uri"].endswith("/return_value/my_model_1_.bin")
    assert values.read_artifact(ref, storage, tmp_path / "cache").read_bytes() == b"w"


def test_a_value_nothing_can_write_is_refused_with_the_fix(tmp_path, storage):
    generator = (i for i in range(3))
    with pytest.raises(NoMaterializerError) as err:
        values.write_artifact(generator, f"file://{tmp_path}/out/value", storage)
    assert "generator" in str(err.value)
    assert "list(...) of a generator" in str(err.value)
    assert not list((tmp_path / "out").glob("value*"))  # nothing half-written left behind


def test_tampered_artifact_is_refused_before_deserializing(tmp_path, storage):
    ref = values.write_artifact(list(range(10)), f"file://{tmp_path}/out/v", storage)
    path = pathlib.Path(ref["uri"].removeprefix("file://"))
    path.write_text(json.dumps(list(range(11))))
    with pytest.raises(values.ArtifactIntegrityError, match="does not match the digest"):
        values.read_artifact(ref, storage, tmp_path / "cache")


def test_tampered_pickle_is_never_unpickled(tmp_path, storage):
    ref = values.write_artifact({1, 2}, f"file://{tmp_path}/out/v", storage)
    path = pathlib.Path(ref["uri"].removeprefix("file://"))
    path.write_bytes(b"cos\nsystem\n(S'echo owned'\ntR.")  # a malicious pickle
    with pytest.raises(values.ArtifactIntegrityError):
        values.read_artifact(ref, storage, tmp_path / "cache")


def test_missing_artifact_says_so(tmp_path, storage):
    ref = values.write_artifact([1], f"file://{tmp_path}/out/v", storage)
    pathlib.Path(ref["uri"].removeprefix("file://")).unlink()
    with pytest.raises(values.ArtifactMissingError, match="does not exist"):
        values.read_artifact(ref, storage, tmp_path / "cache")


def test_pickles_from_another_python_are_refused(tmp_path, storage):
    ref = values.write_artifact({1, 2}, f"file://{tmp_path}/out/v", storage)
    ref["python"] = "3.9"
    with pytest.raises(values.PythonVersionMismatchError, match="Python 3.9"):
        values.read_artifact(ref, storage, tmp_path / "cache")


def test_encode_inlines_small_json_and_writes_the_rest(tmp_path, storage):
    written = []

    def write(value, name):
        written.append(name)
        return values.write_artifact(value, f"file://{tmp_path}/{name}", storage)

    assert values.encode({"k": 1}, name="r", inline_limit=100, write=write) == {"inline": {"k": 1}}
    big = values.encode(list(range(1000)), name="r", inline_limit=100, write=write)
    assert big["ref"]["materializer"] == "json" and written == ["r"]


def test_a_small_tuple_travels_inline_and_comes_back_a_tuple(tmp_path, storage):
    """JSON would turn it into a list, and a pickle into an ArtifactRef the task must load."""
    import collections

    def write(value, name):
        return values.write_artifact(value, f"file://{tmp_path}/{name}", storage)

    def roundtrip(value, limit=100):
        node = values.encode(value, name="r", inline_limit=limit, write=write)
        return node, values.decode(node, lambda r: values.read_artifact(r, storage, tmp_path))

    node, back = roundtrip((1, "a", [2, (3, 4)]))
    assert "ref" not in json.dumps(node)
    assert back == (1, "a", [2, (3, 4)]) and type(back[2][1]) is tuple
    assert roundtrip({"pair": (0.5, None)})[1] == {"pair": (0.5, None)}
    assert "ref" in roundtrip(tuple(range(1000)))[0]  # too big to inline: one artifact
    point = collections.namedtuple("Point", "x y")(1, 2)
    node, back = roundtrip(point)  # keeps its class
    assert "ref" in node and type(back).__name__ == "Point"


def test_references_nested_in_containers_pass_by_reference(tmp_path, storage):
    record = values.write_artifact(np.arange(3), f"file://{tmp_path}/a", storage)
    ref = ArtifactRef.from_record(record)
    node = values.encode(
        {"model": ref, "lr": 0.1},
        name="kw",
        inline_limit=100,
        write=lambda v, n: pytest.fail("nothing should be written"),
        as_ref=as_record,
    )
    assert node == {"dict": {"model": {"ref": record}, "lr": {"inline": 0.1}}}
    decoded = values.decode(node, lambda r: values.read_artifact(r, storage, tmp_path / "c"))
    np.testing.assert_array_equal(decoded["model"], np.arange(3))


def test_strict_json_rejects_what_json_would_change():
    assert is_strict_json({"a": [1, "x", None, 2.5]})
    assert not is_strict_json((1, 2))
    assert not is_strict_json({1: "int key"})
    assert not is_strict_json(float("nan"))
    assert not is_strict_json(np.int64(3))


def test_artifact_ref_roundtrips_through_xcom_serialization(tmp_path, storage):
    from airflow.sdk.serde import deserialize, serialize

    record = values.write_artifact(np.ones(4), f"file://{tmp_path}/a", storage)
    ref = ArtifactRef.from_record(record)
    encoded = serialize(ref)
    assert len(json.dumps(encoded)) < 1024
    back = deserialize(json.loads(json.dumps(encoded)))
    assert back == ref
    np.testing.assert_array_equal(back.load(), np.ones(4))


def test_a_path_inside_a_returned_dict_or_list_keeps_its_files(tmp_path, storage):
    model = tmp_path / "job" / "model"
    model.mkdir(parents=True)
    (model / "weights.bin").write_bytes(b"w" * 100)
    report = tmp_path / "job" / "report.txt"
    report.write_text("ok")

    def write(value, name):
        return values.write_artifact(value, f"file://{tmp_path}/out/{name}", storage)

    node = values.encode(
        {"model": model, "score": 0.9, "files": [report]},
        name="return_value", inline_limit=1000, write=write,
    )  # fmt: skip
    assert node["dict"]["score"] == {"inline": 0.9}
    assert node["dict"]["model"]["ref"]["materializer"] == "path"
    assert node["dict"]["files"]["list"][0]["ref"]["materializer"] == "path"
    (tmp_path / "job").rename(tmp_path / "gone")  # the job's disk goes away with the job

    result = values.decode(node, lambda ref: values.read_artifact(ref, storage, tmp_path / "c"))
    assert (result["model"] / "weights.bin").read_bytes() == b"w" * 100
    assert result["files"][0].read_text() == "ok"
    assert result["score"] == 0.9


def test_using_a_reference_as_its_value_says_to_load_it(tmp_path, storage):
    """A list over the inline limit arrives as an ArtifactRef: ``rows[:10]``, ``for row in
    rows`` and ``len(rows)`` must say why they fail."""
    ref = ArtifactRef.from_record(
        values.write_artifact(list(range(10)), f"file://{tmp_path}/l", storage)
    )
    with pytest.raises(TypeError, match=r"not the list itself; call \.load\(\) for the value"):
        ref[:3]
    with pytest.raises(TypeError, match=r"not the list itself; .* then for item in value\."):
        iter(ref)
    with pytest.raises(TypeError, match=r"not the list itself; .* then len\(value\)\."):
        len(ref)
    assert ref  # a reference is there, whatever its value
    assert ref.load()[:3] == [0, 1, 2]


def test_a_returned_path_that_does_not_exist_is_named_where_it_is(tmp_path):
    kept = tmp_path / "kept.txt"
    kept.write_text("x")
    values.refuse_missing_paths({"model": kept, "runs": [kept, "text"]})  # all there: no error
    with pytest.raises(NoMaterializerError) as refused:
        values.refuse_missing_paths({"runs": [kept, tmp_path / "gone.keras"]})
    assert f"PosixPath('{tmp_path}/gone.keras') at return_value['runs'][1]" in str(refused.value)


def test_a_reference_renders_in_a_template_as_the_readme_says():
    """README: ``{{ ti.xcom_pull(...).uri }}`` is the URI; the reference itself renders as
    ``ArtifactRef(<type>, <size> bytes, <uri>)``."""
    import jinja2

    ref = ArtifactRef(
        uri="s3://bucket/steps/train/outputs/return_value.npy", sha256="0" * 64, size=800128,
        materializer="numpy", type_name="numpy.ndarray",
    )  # fmt: skip
    rendered = jinja2.Template("{{ ref.uri }} | {{ ref }}").render(ref=ref)
    assert rendered == (
        "s3://bucket/steps/train/outputs/return_value.npy | ArtifactRef(numpy.ndarray, 800128 "
        "bytes, s3://bucket/steps/train/outputs/return_value.npy)"
    )


def test_a_reference_in_a_dict_is_shown_in_its_short_form():
    """A multiple_outputs result in the task log's ``result:`` line, or a printed dict: the
    fields' long form, cut at 300 characters, would lose the type and size."""
    from airflow_stepop.backends.outcome import shown

    ref = ArtifactRef(
        uri="s3://bucket/steps/train/outputs/model.pkl", sha256="0" * 64, size=5120,
        materializer="pickle", type_name="sklearn.linear_model.LogisticRegression",
    )  # fmt: skip
    short = "ArtifactRef(sklearn.linear_model.LogisticRegression, 5120 bytes, s3://bucket/steps/train/outputs/model.pkl)"  # noqa: E501
    assert shown({"model": ref, "score": 0.9}) == f"{{'model': {short}, 'score': 0.9}}"
    assert repr([ref]) == f"[{short}]"
