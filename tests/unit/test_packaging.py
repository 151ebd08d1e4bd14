"""The code bundle: what goes in, what stays out, and that it is content-addressed."""

from __future__ import annotations

import importlib
import io
import json
import sys
import textwrap
import zipfile
from pathlib import Path

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
    # a helper of DAG files: a step module that uses it imports Airflow without naming it
    (root / "mylib" / "dag_helpers.py").write_text(
        "from airflow.sdk import Variable\n\nTEAM = 'ml'\n\n"
        "def prefix(x):\n    return f'{TEAM}-{x}'\n"
    )
    (root / "team_steps.py").write_text(
        "from mylib.dag_helpers import TEAM, prefix\n\ndef tag(x):\n    return prefix(x) + TEAM\n"
    )
    monkeypatch.syspath_prepend(str(root))
    names = ("train", "dag_file", "team_steps", "unused")
    names += ("mylib", "mylib.features", "mylib.scaling", "mylib.dag_helpers")
    for name in names:
        sys.modules.pop(name, None)
    yield root
    for name in names:
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


def test_a_module_that_imports_airflow_through_a_local_helper_travels_by_value(user_code):
    """The job may have no Airflow: importing the step's module there would fail in the
    helper's import, so the function is pickled, and the helper still travels as a file."""
    import os
    import subprocess

    bundle = build_bundle(importlib.import_module("team_steps").tag)
    assert bundle.callable_entry["kind"] == "pickle"
    assert "code/mylib/dag_helpers.py" in _names(bundle)
    # what it calls from the helper travels with it: it runs where Airflow cannot be imported
    job = user_code.parent / "job"
    zipfile.ZipFile(io.BytesIO(bundle.data)).extractall(job)
    probe = (
        "import pickle, sys\n"
        "sys.modules['airflow'] = None  # no Airflow here\n"
        "print(pickle.load(open('callable.pkl', 'rb'))('x'))\n"
    )
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{job}/deps"}
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe], cwd=job, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ml-xml"]


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

    with pytest.raises(PackagingError, match="cannot be pickled") as refused:
        build_bundle(uses_lock)
    assert "It uses the closure variable 'lock', a lock." in str(refused.value)
    assert "Create such an object inside the step" in str(refused.value)


# ---- the on-disk bundle cache: a task process reuses what an earlier task packaged ----------


def _age(root, seconds: float = 60.0) -> None:
    """Files written a while ago (the cache keeps no entry for files modified just now)."""
    import os
    import time

    past = time.time() - seconds
    for path in [root, *root.rglob("*")]:
        os.utime(path, (past, past))


def _member(bundle, name: str) -> bytes:
    return zipfile.ZipFile(io.BytesIO(bundle.data)).read(name)


def test_a_cached_bundle_is_the_bundle_a_fresh_build_makes(user_code, tmp_path):
    from airflow_stepop.packaging.cache import BundleCache

    _age(user_code)
    train = importlib.import_module("train").train
    cache = BundleCache(tmp_path / "cache")
    first = build_bundle(train, cache)
    assert list(cache.root.glob("*.json"))  # an entry for the next task
    again = build_bundle(train, cache)
    fresh = build_bundle(train)
    assert again.sha256 == first.sha256 == fresh.sha256
    assert again.callable_entry == fresh.callable_entry
    assert again.data == fresh.data


def test_an_edited_local_module_ships_the_new_code(user_code, tmp_path, monkeypatch):
    """A same-size edit of a module the callable imports: the next staging uploads new code."""
    from airflow_stepop.packaging.staging import StepIdentity, stage_step
    from airflow_stepop.runtime.storage import Storage

    _age(user_code)
    train = importlib.import_module("train").train
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))  # the cache's default place
    storage, root = Storage(), f"file://{tmp_path}/artifacts"

    def staged_code(try_number: int) -> bytes:
        step = StepIdentity("dag", "run", "train", -1, try_number)
        staged = stage_step(train, [1], {}, root=root, step=step, storage=storage)
        return zipfile.ZipFile(io.BytesIO(storage.read_bytes(staged.code_uri))).read(
            "code/mylib/scaling.py"
        )

    assert staged_code(1) == b"def scale(x):\n    return x * 2\n"
    assert list((tmp_path / "home" / "stepop-cache" / "bundles").glob("*.json"))
    (user_code / "mylib" / "scaling.py").write_text("def scale(x):\n    return x * 3\n")
    assert staged_code(2) == b"def scale(x):\n    return x * 3\n"


def test_no_entry_for_files_modified_just_now(user_code, tmp_path):
    """A second edit within the file system's timestamp granularity could keep the mtime:
    files that young are packaged anew by every task until they settle."""
    from airflow_stepop.packaging.cache import BundleCache

    cache = BundleCache(tmp_path / "cache")
    build_bundle(importlib.import_module("train").train, cache)
    assert not list(cache.root.glob("*.json"))


def test_a_damaged_entry_or_zip_is_ignored(user_code, tmp_path):
    from airflow_stepop.packaging.cache import BundleCache

    _age(user_code)
    train = importlib.import_module("train").train
    cache = BundleCache(tmp_path / "cache")
    expected = build_bundle(train)
    build_bundle(train, cache)
    (entry,) = cache.root.glob("*.json")
    entry.write_text('{"format": 1, "stats": [')  # cut short
    assert build_bundle(train, cache).data == expected.data
    (zipped,) = cache.root.glob("*.zip")
    zipped.write_bytes(zipped.read_bytes()[:-10] + b"0123456789")  # same size, other bytes
    bundle = build_bundle(train, cache)
    assert bundle.sha256 == expected.sha256 and bundle.data == expected.data


def test_concurrent_tasks_share_the_cache_without_damage(user_code, tmp_path):
    import multiprocessing

    from airflow_stepop.packaging.cache import BundleCache

    _age(user_code)
    train = importlib.import_module("train").train
    cache = BundleCache(tmp_path / "cache")
    expected = build_bundle(train).sha256
    # spawn, not fork: a fork of this many-threaded test process can leave a worker dead while
    # it holds the pool's queue lock, and the pool then waits for it forever (seen once in CI)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        shas = pool.map(_build_sha, [(train, cache)] * 16)
    assert set(shas) == {expected}
    assert not list(cache.root.glob(".tmp-*"))
    assert cache.read_zip(expected) is not None
    assert build_bundle(train, cache).sha256 == expected


def _build_sha(args) -> str:
    function, cache = args
    return build_bundle(function, cache).sha256


def test_a_closure_with_other_values_is_not_taken_from_the_cache(user_code, tmp_path):
    from airflow_stepop.packaging.cache import BundleCache

    _age(user_code)
    module = importlib.import_module("dag_file")
    cache = BundleCache(tmp_path / "cache")
    three = build_bundle(module.make_closure(3), cache)
    assert build_bundle(module.make_closure(3), cache).sha256 == three.sha256
    four = build_bundle(module.make_closure(4), cache)
    assert four.sha256 != three.sha256
    assert four.data == build_bundle(module.make_closure(4)).data


def test_the_run_directory_of_a_try_is_safe_on_every_object_store():
    from airflow_stepop.packaging.staging import StepIdentity, run_uri_for

    step = StepIdentity("my dag", "manual__2026-01-01T00:00:00+00:00", "__train__", -1, 2)
    assert run_uri_for("s3://bucket/root", step) == (
        "s3://bucket/root/my_dag/manual__2026-01-01T00_00_00_00_00/train/-1/2"
    )
    assert run_uri_for("s3://b", StepIdentity("d", "::", "é", 3, 1)) == "s3://b/d/_/_/3/1"


def test_a_module_that_appears_where_an_import_looks_is_shipped(user_code, tmp_path, monkeypatch):
    """An import the bundle could not resolve when it was built (a lazy one) is resolved anew
    once a module appears beside the DAGs or in another local directory on sys.path."""
    from airflow_stepop.packaging.cache import BundleCache

    (user_code / "lazy.py").write_text(
        "def step():\n    import helper\n    import plugin_helper\n    return helper.X\n"
    )
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    monkeypatch.syspath_prepend(str(plugins))
    _age(user_code)
    _age(plugins)
    step = importlib.import_module("lazy").step
    cache = BundleCache(tmp_path / "cache")
    assert "code/helper.py" not in _names(build_bundle(step, cache))
    assert list(cache.root.glob("*.json"))
    (user_code / "helper.py").write_text("X = 1\n")
    assert "code/helper.py" in _names(build_bundle(step, cache))
    _age(user_code)
    build_bundle(step, cache)  # cached again, with helper.py
    (plugins / "plugin_helper.py").write_text("Y = 2\n")
    assert "code/plugin_helper.py" in _names(build_bundle(step, cache))
    sys.modules.pop("lazy", None)


def test_a_steps_module_may_import_settings_and_refs_in_a_job_without_airflow(tmp_path):
    """The job's ``airflow_stepop`` is the bundle's: it offers the settings and ArtifactRef a
    step's modules may share with the DAG, and names the fix for an operator import."""
    from airflow_stepop.packaging.staging import StepIdentity, stage_step
    from airflow_stepop.runtime.storage import Storage

    code = tmp_path / "dags"
    code.mkdir()
    (code / "shared_settings.py").write_text(
        "from airflow_stepop import ArtifactRef, DockerSettings, ResourceSettings\n"
        "GPU = ResourceSettings(gpu_count=1, memory='8GiB')\n"
    )
    (code / "settings_steps.py").write_text(
        textwrap.dedent(
            """
            from shared_settings import GPU, ArtifactRef

            def gpus(ref: ArtifactRef | None = None):
                try:
                    from airflow_stepop import LocalStepOperator  # noqa: F401
                except ImportError as exc:
                    return [GPU.gpu_count, str(exc)]
                return [GPU.gpu_count, "imported"]
            """
        )
    )
    sys.path.insert(0, str(code))
    try:
        function = importlib.import_module("settings_steps").gpus
        staged = stage_step(
            function, [], {}, root=f"file://{tmp_path}/root",
            step=StepIdentity("dag", "run", "gpus", -1, 1), storage=Storage(),
        )  # fmt: skip
    finally:
        sys.path.remove(str(code))
        for name in ("settings_steps", "shared_settings"):
            sys.modules.pop(name, None)
    process = _run_in_a_bare_job(staged, tmp_path)
    assert process.returncode == 0, process.stderr
    gpus, message = Storage().read_json(staged.run_uri + "/result.json")["outputs"]["inline"]
    assert gpus == 1
    assert "airflow_stepop.LocalStepOperator is not available inside a step's job" in message
    assert "Import it in the DAG file instead" in message


def _run_in_a_bare_job(staged, tmp_path):
    """Run a staged step as a job whose Python has only the bundle: no site-packages (no
    Airflow, no airflow-stepop), started elsewhere than the repository (whose airflow_stepop
    ``-m`` would find first)."""
    import os
    import subprocess

    bundle = tmp_path / "bundle"
    zipfile.ZipFile(staged.code_uri.removeprefix("file://")).extractall(bundle)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(bundle), "HOME": str(tmp_path)}
    run = [sys.executable, "-S", "-m", "airflow_stepop.runtime", staged.spec_uri]
    return subprocess.run(run, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_a_pickled_steps_traceback_names_its_file_and_shows_its_lines_where_the_file_is_not(
    tmp_path,
):
    """A job on a cloud has no copy of the DAG file: its traceback still names the file and line
    of each frame, with the line's text, for the step and a closure it calls. Before, the text
    was missing there, and cloudpickle >= 3.1.3 named every file ``<dynamic-code>``."""
    from airflow_stepop.packaging.staging import StepIdentity, stage_step
    from airflow_stepop.runtime.storage import Storage

    dags = tmp_path / "dags"
    dags.mkdir()
    dag_file = dags / "failing_dag.py"
    dag_file.write_text(
        textwrap.dedent(
            """
            from airflow.sdk import dag

            def make_check(limit):
                def check(x):
                    if x > limit:
                        raise ValueError(f"bad value {x}")
                return check

            def train(x):
                make_check(10)(x)  # the step's own line
            """
        )
    )
    sys.path.insert(0, str(dags))
    try:
        function = importlib.import_module("failing_dag").train
        staged = stage_step(
            function, [42], {}, root=f"file://{tmp_path}/root",
            step=StepIdentity("dag", "run", "train", -1, 1), storage=Storage(),
        )  # fmt: skip
    finally:
        sys.path.remove(str(dags))
        sys.modules.pop("failing_dag", None)
    dag_file.unlink()  # as in the job's container

    process = _run_in_a_bare_job(staged, tmp_path)
    assert process.returncode == 1
    traceback = Storage().read_json(staged.run_uri + "/error.json")["traceback"]
    assert f'File "{dag_file}", line 11, in train\n    make_check(10)(x)  # the step' in traceback
    assert f'File "{dag_file}", line 7, in check\n    raise ValueError(' in traceback
    assert traceback.endswith("ValueError: bad value 42\n")


def test_the_shipped_source_lines_are_the_steps_statements_not_its_decorator_nor_comments(
    tmp_path,
):
    """A decorator's arguments ran where the DAG was parsed (a connection's secret may be one),
    and a comment between statements is not code: neither goes in the bundle. A statement over
    several lines goes whole (Python 3.13 shows all of them in a traceback)."""
    from airflow_stepop.packaging.by_value import pickle_by_value

    (tmp_path / "decorated_dag.py").write_text(
        textwrap.dedent(
            """
            def deco(**kwargs):
                return lambda function: function

            @deco(environment={"API_KEY": "sk-live-123"})
            def step(x):
                # token = "ghp_not_for_the_job"
                y = max(
                    x,
                    1,
                )
                return y / 0
            """
        )
    )
    sys.path.insert(0, str(tmp_path))
    try:
        sources = pickle_by_value(importlib.import_module("decorated_dag").step).sources
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("decorated_dag", None)
    (lines,) = sources.values()
    assert sorted(map(int, lines)) == [8, 9, 10, 11, 12]
    assert lines["11"] == "    )\n" and lines["12"] == "    return y / 0\n"
    assert "sk-live" not in json.dumps(sources) and "ghp_" not in json.dumps(sources)


def test_a_step_may_import_airflow_where_the_job_has_it_and_airflow_stepop_installed(tmp_path):
    """Airflow's provider discovery finds the installed distribution's entry point, which the
    bundle's package shadows in a job: importing Airflow (or a library that does) works."""
    import os
    import subprocess

    from airflow_stepop.packaging import job_init

    package = tmp_path / "bundle" / "airflow_stepop"
    package.mkdir(parents=True)
    # the bundle's airflow_stepop/__init__.py (packaging/bundle.py)
    (package / "__init__.py").write_text(Path(job_init.__file__).read_text())
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(package.parent),  # as the job's runtime puts the bundle first
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "HOME": str(tmp_path),
    }
    probe = (
        "from airflow.providers_manager import ProvidersManager\n"
        "from airflow.configuration import conf\n"
        "info = ProvidersManager().providers['airflow-stepop']\n"
        "print(conf.get('core', 'executor'), info.data['name'])\n"
    )
    process = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-2000:]
    assert process.stdout.split()[-2:] == ["Step", "operators"]


def test_every_public_name_is_either_shipped_to_jobs_or_named_as_airflow_side():
    import airflow_stepop
    from airflow_stepop.packaging import job_init

    own = ["get_provider_info"]  # the job's own, for Airflow imported in a job
    assert sorted([*job_init.SHIPPED, *job_init.AIRFLOW_SIDE, *own]) == sorted(
        airflow_stepop.__all__
    )
    for name, module in job_init.SHIPPED.items():  # the real package's own source of the name
        assert airflow_stepop._EXPORTS[name] == module


@pytest.mark.parametrize(
    ("by_keyword", "named"),
    [(False, "op_args[0] (parameter 'x')"), (True, "op_kwargs['x']")],
)
def test_an_argument_that_cannot_be_sent_is_named_with_an_argument_fix(
    user_code, tmp_path, monkeypatch, by_keyword, named
):
    """It used to get the message written for a result ("Return one of those types")."""
    import threading

    from airflow_stepop.packaging.staging import StepIdentity, stage_step
    from airflow_stepop.runtime.materializers import NoMaterializerError
    from airflow_stepop.runtime.storage import Storage

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    lock = threading.Lock()
    with pytest.raises(NoMaterializerError) as refused:
        stage_step(
            importlib.import_module("dag_file").step,
            [] if by_keyword else [lock],
            {"x": lock} if by_keyword else {},
            root=f"file://{tmp_path}/root",
            step=StepIdentity("d", "r", "t", -1, 1),
            storage=Storage(),
        )
    message = str(refused.value)
    assert message.startswith(
        f"The step's argument {named} cannot be sent to its job: a value of type "
        "_thread.lock is not JSON"
    )
    assert "Pass a value of one of those types instead; for a lock, a client" in message


def test_a_step_that_captures_large_data_is_warned_about(caplog):
    """A DAG-file step closing over a 12 MiB array went into the code bundle with no word."""
    import logging

    data = b"\x00" * (12 * 2**20)

    def step():
        return len(data)

    with caplog.at_level(logging.WARNING, logger="airflow_stepop.packaging.bundle"):
        build_bundle(step)
    assert "travels pickled with what it uses, 12 MiB: it captures data" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="airflow_stepop.packaging.bundle"):
        build_bundle(lambda: 1)
    assert caplog.text == ""
