"""The code bundle: what goes in, what stays out, and that it is content-addressed."""

from __future__ import annotations

import importlib
import io
import sys
import textwrap
import zipfile

import pytest

from airflow_stepop.packaging.bundle import PackagingError, build_bundle


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """A DAGs folder with a helper package, a plain module and a DAG-like module."""
    root = tmp_path / "dags"
    (root / "mylib").mkdir(parents=True)
    (root / "mylib" / "__init__.py").write_text("")
    (root / "mylib" / "features.py").write_text(
        "import numpy\nfrom . import scaling\n\ndef features(x):\n    return scaling.scale(x)\n"
    )
    (root / "mylib" / "scaling.py").write_text("def scale(x):\n    return x * 2\n")
    (root / "unused.py").write_text("VALUE = 1\n")
    (root / "train.py").write_text(
        textwrap.dedent(
            """
            import json
            from mylib.features import features

            def train(x):
                return features(x) + 1

            class Trainer:
                @staticmethod
                def fit(x):
                    return x
            """
        )
    )
    (root / "dag_file.py").write_text(
        textwrap.dedent(
            """
            from airflow.sdk import dag
            from mylib.features import features

            def step(x):
                return features(x)

            def make_closure(k):
                def inner(x):
                    return x + k
                return inner
            """
        )
    )
    monkeypatch.syspath_prepend(str(root))
    for name in ("train", "dag_file", "mylib", "mylib.features", "mylib.scaling", "unused"):
        sys.modules.pop(name, None)
    yield root
    for name in ("train", "dag_file", "mylib", "mylib.features", "mylib.scaling", "unused"):
        sys.modules.pop(name, None)


def _names(bundle) -> set[str]:
    return set(zipfile.ZipFile(io.BytesIO(bundle.data)).namelist())


def test_module_function_is_imported_by_name_with_its_local_imports(user_code):
    train = importlib.import_module("train").train
    bundle = build_bundle(train)
    assert bundle.callable_entry == {"kind": "import", "module": "train", "qualname": "train"}
    names = _names(bundle)
    assert {
        "code/train.py",
        "code/mylib/__init__.py",
        "code/mylib/features.py",
        "code/mylib/scaling.py",
    } <= names
    assert "code/unused.py" not in names  # not imported
    assert not any("numpy" in n or "airflow/sdk" in n for n in names)  # site-packages stay out
    assert "airflow_stepop/runtime/main.py" in names
    assert "callable.pkl" not in names


def test_nested_qualname_is_imported_by_name(user_code):
    fit = importlib.import_module("train").Trainer.fit
    assert build_bundle(fit).callable_entry["qualname"] == "Trainer.fit"


def test_functions_of_a_dag_file_travel_by_value(user_code):
    module = importlib.import_module("dag_file")
    bundle = build_bundle(module.step)
    assert bundle.callable_entry["kind"] == "pickle"
    names = _names(bundle)
    assert "callable.pkl" in names
    assert "code/mylib/features.py" in names  # its local imports still travel as files
    assert "code/dag_file.py" not in names
    assert any(n.startswith("deps/cloudpickle/") for n in names)


def test_closures_and_lambdas_travel_by_value(user_code):
    module = importlib.import_module("dag_file")
    assert build_bundle(module.make_closure(3)).callable_entry["kind"] == "pickle"
    assert build_bundle(lambda x: x).callable_entry["kind"] == "pickle"


def test_same_code_same_hash_edit_changes_it(user_code):
    train = importlib.import_module("train").train
    first, second = build_bundle(train), build_bundle(train)
    assert first.sha256 == second.sha256 and first.data == second.data
    (user_code / "mylib" / "scaling.py").write_text("def scale(x):\n    return x * 3\n")
    assert build_bundle(train).sha256 != first.sha256


def test_interactive_main_is_refused_with_the_fix(monkeypatch):
    namespace: dict = {"__name__": "__main__"}
    exec("def f():\n    return 1\n", namespace)
    fake_main = type(sys)("__main__")  # a __main__ without a file, like a REPL's
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    with pytest.raises(PackagingError, match="Move it into a module file"):
        build_bundle(namespace["f"])


def test_unpicklable_closure_is_refused(user_code):
    import threading

    lock = threading.Lock()

    def uses_lock():
        with lock:
            return 1

    with pytest.raises(PackagingError, match="cannot be pickled"):
        build_bundle(uses_lock)
