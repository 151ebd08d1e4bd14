"""docs/write-a-backend.md as a new user tries it: its service, backend, operator, decorator,
DAG and provider entry point, taken from the page (never copied) and run under ``dag.test()``,
and the page's own test of a kill and a re-attach, run with pytest as a user runs it.

The page's service runs in this process (a thread), so the test sees its jobs; the steps' jobs
are real processes that it starts. Faults are provoked as tests/e2e does: a worker lost after
the submit, after or before the task state store's record (a retry then finds the job through
``status`` or through ``find_active``), a user's kill as a triggerer delivers it (the trigger
cancelled, then its ``on_kill`` awaited), and a ``max_runtime`` that the step's runtime enforces
on itself (tinyjobs has no runtime limit of its own). The page's trust rules too: a code bundle
rewritten in the artifact root after the submit never runs, and a job of the same name that
another try started is never attached to. And the step cache on the page's backend: its
``job_record`` answers from the service's own record, and the page's DAG run again starts no
second job for its ``cache=True`` step.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import importlib
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import tomllib
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_stepop.runtime.spec import MAX_RUNTIME_EXIT_CODE
from tests.doc_blocks import REPO, python_block
from tests.waiting import wait_for

PAGE = "docs/write-a-backend.md"
SERVICE_BLOCK = "class JobService("
BACKEND_BLOCK = "class TinyJobsBackend("
DAG_BLOCK = 'with DAG("tinyjobs_demo"'
TEST_BLOCK = "def test_a_users_kill_stops_the_job("
MODULES = ("tinyjobs_service", "tinyjobs", "tinyjobs_provider", "tinyjobs_dag", "guide_faults")


@pytest.fixture
def saved(tmp_path, monkeypatch):
    """The page's service and backend saved as a user saves them, importable by their names."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "tinyjobs_service.py").write_text(python_block(PAGE, SERVICE_BLOCK))
    (code / "tinyjobs.py").write_text(python_block(PAGE, BACKEND_BLOCK))
    monkeypatch.syspath_prepend(str(code))
    for name in MODULES:
        sys.modules.pop(name, None)
    yield code
    for name in MODULES:
        sys.modules.pop(name, None)


@pytest.fixture
def guide(saved, monkeypatch, airflow_db, artifact_root):
    """The page's service started (a thread of this process), ``TINYJOBS_URL`` set."""
    service = importlib.import_module("tinyjobs_service").JobService(port=0)
    serving = threading.Thread(target=service.serve_forever, daemon=True)
    serving.start()
    monkeypatch.setenv("TINYJOBS_URL", service.url)
    try:
        yield SimpleNamespace(
            service=service,
            service_module=importlib.import_module("tinyjobs_service"),
            tinyjobs=importlib.import_module("tinyjobs"),
        )
    finally:
        service.shutdown()
        service.server_close()  # ends every job still running
        serving.join(10)


def _run(tmp_path, monkeypatch, module: str, source: str, dag_name: str):
    """Save ``source`` as a DAG file of its own DAG bundle, the page's bundle list, and run its
    DAG with dag.test() (Airflow 3.3 runs a DAG as its bundle has it)."""
    dags = tmp_path / "dags"
    dags.mkdir(exist_ok=True)
    (dags / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(dags))
    shown = re.search(r"```json\n(.*?)```", (REPO / PAGE).read_text(), re.S).group(1)
    bundles = json.loads(shown.replace("/path/to/the/folder", str(dags)))
    assert [b["kwargs"].get("path") for b in bundles] == [None, str(dags)]
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(bundles))
    sys.modules.pop(module, None)
    return getattr(importlib.import_module(module), dag_name).test()


def _xcoms(run) -> dict:
    from airflow.models.xcom import XComModel
    from airflow.sdk.serde import deserialize
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(XComModel)
            .filter(XComModel.dag_id == run.dag_id, XComModel.run_id == run.run_id)
            .all()
        )
        return {(r.task_id, r.key): deserialize(r.value) for r in rows}


def _jobs(service, task_id: str) -> list:
    return [job for job in service.jobs.values() if job.labels.get("task_id") == task_id]


def test_the_guides_dag_runs_its_steps_on_the_guides_service(guide, tmp_path, monkeypatch, capfd):
    dag_file = python_block(PAGE, DAG_BLOCK)
    run = _run(tmp_path, monkeypatch, "tinyjobs_dag", dag_file, "tinyjobs_demo")
    logged = capfd.readouterr()
    assert run.state == "success", logged.out[-4000:]
    rows = _xcoms(run)
    # 1. results come back through XCom: bytes as a reference, total's 6 inline
    weights = rows[("train", "return_value")]
    assert type(weights).__name__ == "ArtifactRef"
    assert weights.load() == bytes(range(256)) * 3
    assert rows[("total", "return_value")] == 6
    assert f"{256 * 3} 6" in logged.out  # what report printed
    # each step ran as a job of the service, which says it succeeded
    [train] = _jobs(guide.service, "train")
    [total] = _jobs(guide.service, "total")
    assert (train.state, total.state) == ("succeeded", "succeeded")
    # 3. what the step printed reached the task log, relayed by the trigger as "[job] line"
    for epoch, loss in enumerate(("1.000", "0.500", "0.333")):
        assert f"[{train.name}] epoch {epoch}: loss {loss}" in logged.out

    # The step cache's check: the service's own record of the job, its spec's sha256 from the
    # env the service kept, the handle from its command (the run the spec is in).
    backend = guide.tinyjobs.TinyJobsBackend(guide.service.url)
    record = backend.job_record(train.name)
    spec_uri = train.command[-1]  # the runtime's one argument
    spec = Path(guide.tinyjobs.local_path(spec_uri)).read_bytes()
    assert record.status.state == "succeeded"
    assert record.handle == {"job_id": train.name, "run_uri": spec_uri.rsplit("/", 1)[0]}
    assert record.spec_sha256 == hashlib.sha256(spec).hexdigest()
    with pytest.raises(guide.tinyjobs.TinyJobsError) as missing:
        backend.job_record("no-such-job")
    assert backend.is_gone(missing.value)  # a miss: the step would run

    # Run again, unchanged: train (cache=True) starts no job and returns the first job's result
    # (the same reference); total, which does not cache, runs again.
    again = _run(tmp_path, monkeypatch, "tinyjobs_dag", dag_file, "tinyjobs_demo")
    logged = capfd.readouterr()
    assert again.state == "success", logged.out[-4000:]
    assert _jobs(guide.service, "train") == [train]
    assert len(_jobs(guide.service, "total")) == 2
    assert f"Step cache hit: returning the result of job {train.name} (run {run.run_id}," in (
        logged.out + logged.err
    )
    assert _xcoms(again)[("train", "return_value")] == weights
    assert f"{256 * 3} 6" in logged.out


# Test DAGs of the page's operator: a step held until the test lets it go, with one retry.
FAULT_DAGS = textwrap.dedent(
    """
    import os
    import time
    from datetime import timedelta
    from pathlib import Path

    from airflow.sdk import DAG

    from tinyjobs import TinyJobsStepOperator

    SERVICE = os.environ["TINYJOBS_URL"]
    HERE = os.environ["GUIDE_TEST_DIR"]


    def held(release, started):
        Path(started).touch()
        try:
            print("holding until released", flush=True)
            deadline = time.monotonic() + 120
            while not os.path.exists(release):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{release} never appeared")
                time.sleep(0.05)
        finally:
            print("saving my work on the way out", flush=True)
        return "done by the first job"


    with DAG("guide_held", schedule=None) as guide_held:
        TinyJobsStepOperator(
            task_id="held",
            python_callable=held,
            op_args=[f"{HERE}/release", f"{HERE}/started"],
            service_url=SERVICE,
            retries=1,
            retry_delay=timedelta(0),
        )

    with DAG("guide_timed", schedule=None) as guide_timed:  # never released: max_runtime ends it
        TinyJobsStepOperator(
            task_id="timed",
            python_callable=held,
            op_args=[f"{HERE}/release", f"{HERE}/started"],
            service_url=SERVICE,
            max_runtime=1,
            execution_timeout=timedelta(seconds=30),  # a backend that ignores it fails sooner
        )


    def ran(started):
        Path(started).touch()
        return "ran"


    with DAG("guide_once", schedule=None) as guide_once:  # one try: one job per run
        TinyJobsStepOperator(
            task_id="once",
            python_callable=ran,
            op_args=[f"{HERE}/started"],
            service_url=SERVICE,
            retries=0,
        )
    """
)


def _run_held(tmp_path, monkeypatch, dag_name: str = "guide_held"):
    monkeypatch.setenv("GUIDE_TEST_DIR", str(tmp_path))
    return _run(tmp_path, monkeypatch, "guide_faults", FAULT_DAGS, dag_name)


@pytest.mark.parametrize("lost", ["after its record", "before its record"])
def test_a_retry_re_attaches_to_the_job_of_the_first_try(guide, tmp_path, monkeypatch, capfd, lost):
    """Try 1's worker dies after the submit. With the task state store's record the retry asks
    ``status`` about the recorded job; without one (lost between the submit and the record) it
    asks ``find_active``. Either way it follows the first job: no second one starts."""
    operator, backend = guide.tinyjobs.TinyJobsStepOperator, guide.tinyjobs.TinyJobsBackend
    submit, defer = backend.submit, operator.defer
    submitted, deferred = [], []

    def submit_then_lose_the_worker(self, request):
        submitted.append(handle := submit(self, request))
        if lost == "before its record" and len(submitted) == 1:
            raise RuntimeError("simulated: the worker died before it recorded the job")
        return handle

    def defer_or_lose_the_worker(self, **kwargs):
        deferred.append(kwargs["trigger"].handle)
        if lost == "after its record" and len(deferred) == 1:
            raise RuntimeError("simulated: the worker died after it recorded the job")
        (tmp_path / "release").touch()  # the first job may end now
        return defer(self, **kwargs)

    monkeypatch.setattr(backend, "submit", submit_then_lose_the_worker)
    monkeypatch.setattr(operator, "defer", defer_or_lose_the_worker)
    run = _run_held(tmp_path, monkeypatch)
    logged = capfd.readouterr().out
    assert run.state == "success", logged[-4000:]
    [job] = _jobs(guide.service, "held")  # one job: try 2 started none
    assert [h["job_id"] for h in submitted] == [job.name]
    assert job.name.endswith("-t1") and job.state == "succeeded"
    assert deferred[-1]["job_id"] == job.name and deferred[-1]["earlier_try"]
    assert f"Re-attaching to job {job.name}" in logged
    assert _xcoms(run)[("held", "return_value")] == "done by the first job"


def test_a_users_kill_stops_the_job(guide, tmp_path, monkeypatch, capfd):
    """A user marks the deferred task failed: the triggerer cancels its trigger and awaits the
    trigger's ``on_kill``, which stops the job (``astop``) and relays what the step prints as it
    stops. Here the trigger is run that way once it relays the step's first line."""
    from airflow_stepop.triggers.step_job import StepJobTrigger

    follow, printed = StepJobTrigger.run, []

    def relayed(line: str) -> bool:
        printed.append(capfd.readouterr().out)
        return line in "".join(printed)

    async def run_until_a_users_kill(self):
        watching = asyncio.ensure_future(anext(follow(self), None))
        first = f"[{self.handle['job_id']}] holding until released"
        await asyncio.to_thread(wait_for, lambda: relayed(first), 60, "the relay's first line")
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        await self.on_kill()
        raise RuntimeError("simulated: the user marked the task failed")
        yield  # an async generator, as run() is

    monkeypatch.setattr(StepJobTrigger, "run", run_until_a_users_kill)
    run = _run_held(tmp_path, monkeypatch)
    relayed("")
    assert run.state == "failed"
    [job] = _jobs(guide.service, "held")
    assert job.state == "cancelled"  # the service was asked to stop it (astop), and it ended
    assert job.process.poll() is not None
    assert f"[{job.name}] saving my work on the way out" in "".join(printed)  # after the kill


def _parse(tmp_path, monkeypatch, service_url: str):
    """The page's DAG file parsed as the DAG processor parses a DAGs folder that also holds
    tinyjobs.py (the module is found on sys.path: the DAGs folder is on it)."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("TINYJOBS_URL", service_url)
    dags = tmp_path / "parsed"
    dags.mkdir()
    (dags / "tinyjobs_dag.py").write_text(python_block(PAGE, DAG_BLOCK))
    return DagBag(dag_folder=str(dags))


def test_the_guides_dag_parses_beside_its_module(saved, tmp_path, monkeypatch):
    bag = _parse(tmp_path, monkeypatch, "http://127.0.0.1:8765")
    assert not bag.import_errors
    dag = bag.dags["tinyjobs_demo"]
    assert type(dag.get_task("train")).__name__ == "TinyJobsDecoratedOperator"
    assert type(dag.get_task("total")).__name__ == "TinyJobsStepOperator"


def test_a_wrong_argument_fails_the_dag_import_as_the_guide_shows(saved, tmp_path, monkeypatch):
    bag = _parse(tmp_path, monkeypatch, "127.0.0.1:8765")
    [error] = bag.import_errors.values()
    shown = re.search(r"```text\n(.*?)```", (REPO / PAGE).read_text(), re.S).group(1)
    assert shown.strip() in error.splitlines()  # the traceback's last line, as the page has it


def test_a_provider_registers_the_decorator_as_a_task_attribute(saved):
    """What pip install of a distribution with the page's entry point leaves (its metadata),
    then Airflow's own discovery in a fresh process: ``@task.tinyjobs_step`` is the page's
    decorator."""
    (saved / "tinyjobs_provider.py").write_text(python_block(PAGE, "def get_provider_info("))
    pyproject = re.search(r"```toml\n(.*?)```", (REPO / PAGE).read_text(), re.S).group(1)
    info = importlib.import_module("tinyjobs_provider").get_provider_info()
    dist = saved / f"{info['package-name'].replace('-', '_')}-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {info['package-name']}\nVersion: 0.1.0\n"
    )
    groups = tomllib.loads(pyproject)["project"]["entry-points"]
    (dist / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in points.items())
            for group, points in groups.items()
        )
    )
    check = (
        "from airflow.sdk import task; import tinyjobs; "
        "assert task.tinyjobs_step is tinyjobs.tinyjobs_step, task.tinyjobs_step"
    )
    env = {**os.environ, "PYTHONPATH": str(saved)}
    done = subprocess.run(
        [sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_max_runtime_ends_the_job_by_its_runtime(guide, tmp_path, monkeypatch, capfd):
    """tinyjobs has no runtime limit: the backend gives the job ``STEPOP_MAX_RUNTIME_S`` (the
    operator's ``max_runtime``) and the step's runtime ends itself past it, with its own exit
    code and ``StepTimedOut`` raised in the step."""
    run = _run_held(tmp_path, monkeypatch, "guide_timed")
    logged = capfd.readouterr().out
    assert run.state == "failed", logged[-4000:]
    [job] = _jobs(guide.service, "timed")
    assert (job.state, job.exit_code) == ("failed", MAX_RUNTIME_EXIT_CODE)  # the runtime's 124
    assert not (tmp_path / "release").exists()  # nothing else ended it
    # the task's error: the service's end (the backend's reason), then the step's exception
    assert f"Step job {job.name} failed: the job exited with code 124\n" in logged
    assert "The step raised StepTimedOut: the job ran past its max_runtime of 1 s" in logged
    assert f"[{job.name}] saving my work on the way out" in logged  # its finally: ran


def _operator(tinyjobs, **kwargs):
    return tinyjobs.TinyJobsStepOperator(
        task_id="t",
        python_callable=len,
        op_args=[[1]],
        service_url="http://127.0.0.1:8765",
        **kwargs,
    )


def test_max_runtime_is_checked_at_parse_and_reaches_the_triggers_backend(saved):
    from datetime import timedelta

    from airflow_stepop.settings import SettingsError

    tinyjobs = importlib.import_module("tinyjobs")

    def limit(**kwargs):
        backend = _operator(tinyjobs, **kwargs).make_backend()
        rebuilt = type(backend)(**backend.serialize())  # as the triggerer rebuilds it
        assert rebuilt.max_runtime_s == backend.max_runtime_s
        return backend.max_runtime_s

    assert limit() is None  # no execution_timeout either: no limit
    assert limit(execution_timeout=timedelta(minutes=1)) == 60 + 300  # plus RUNTIME_GRACE
    assert limit(max_runtime=timedelta(seconds=90), execution_timeout=timedelta(hours=1)) == 90
    assert limit(max_runtime=7200) == 7200
    for wrong in (0, "1h", True, timedelta(days=400)):
        with pytest.raises(
            SettingsError, match=r"TinyJobsStepOperator\(task_id='t'\)\.max_runtime"
        ):
            _operator(tinyjobs, max_runtime=wrong)


def test_local_artifact_roots_are_file_urls_or_absolute_paths(saved):
    """The page's rule, the local backend's: ``file://`` URLs and absolute paths, in the
    operator's ``artifact_root=`` at parse and in a configured root before anything is staged."""
    from airflow_stepop.settings import SettingsError

    tinyjobs = importlib.import_module("tinyjobs")
    backend = tinyjobs.TinyJobsBackend("http://127.0.0.1:8765")
    for root in ("file:///data/stepop", "/data/stepop", "file://localhost/data/stepop"):
        assert _operator(tinyjobs, artifact_root=root).artifact_root == root
        assert backend.artifact_root(root) == root
        assert tinyjobs.local_path(root) == "/data/stepop"
    rule = "use a file:// URL or an absolute path, e.g. 'file:///data/stepop' or '/data/stepop'"
    for root in ("s3://bucket/stepop", "data/stepop", "file://data/stepop"):
        with pytest.raises(SettingsError) as refused:
            _operator(tinyjobs, artifact_root=root)
        assert str(refused.value).startswith(
            f"TinyJobsStepOperator(task_id='t').artifact_root={root!r} is not on the worker's disk"
        )
        assert rule in str(refused.value)
        with pytest.raises(SettingsError, match=re.escape(rule)):
            backend.artifact_root(root)  # [stepop] artifact_root, checked when the task runs


def test_the_guides_test_of_a_kill_and_a_re_attach_passes(saved):
    """The page's test_tinyjobs.py, saved beside the page's modules and run with pytest as a
    user runs it: a kill through the trigger and through the operator, and a retry that
    re-attaches through ``status`` and through ``find_active``, without a DAG."""
    (saved / "test_tinyjobs.py").write_text(python_block(PAGE, TEST_BLOCK))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "test_tinyjobs.py", "-q", "-p", "no:cacheprovider"],
        cwd=saved,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout


def test_the_pages_try_it_steps_run_as_pasted_and_stop_the_service(tmp_path):
    """The page's shell steps, in a folder holding its three files as a user saves them, in a
    shell without this session's settings: the DAG runs, and nothing is left running."""
    from tests.test_docs_blocks import SESSION_ONLY

    steps = re.search(r"```shell\n(.*?)```", (REPO / PAGE).read_text(), re.S).group(1)
    folder = tmp_path / "try"
    folder.mkdir()
    (folder / "tinyjobs_service.py").write_text(python_block(PAGE, SERVICE_BLOCK))
    (folder / "tinyjobs.py").write_text(python_block(PAGE, BACKEND_BLOCK))
    (folder / "tinyjobs_dag.py").write_text(python_block(PAGE, DAG_BLOCK))
    env = {k: v for k, v in os.environ.items() if not SESSION_ONLY.match(k)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", steps],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert re.search(r"\] epoch 2: loss 0\.333", output), output[-6000:]  # relayed lines
    assert f"{256 * 3} 6" in output, output[-6000:]  # what report printed
    wait_for(lambda: not _answers("http://127.0.0.1:8765/jobs"), timeout=10)  # it stopped


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


def test_an_answer_larger_than_the_bound_is_refused_not_read_whole(saved):
    """Every read on the triggerer is bounded: the example's client reads at most
    MAX_ANSWER_BYTES of an answer (a job that printed one endless line)."""
    import io

    tinyjobs = importlib.import_module("tinyjobs")
    limit = tinyjobs.MAX_ANSWER_BYTES
    assert tinyjobs._bounded(io.BytesIO(b"x" * limit), "/jobs") == b"x" * limit
    endless = io.BytesIO(b"x" * (limit + 10))
    with pytest.raises(ValueError, match="more than"):
        tinyjobs._bounded(endless, "/jobs/j/logs")
    assert endless.tell() == limit + 1  # it stopped reading there


def _with_marker(bundle: bytes, marker: Path) -> bytes:
    """The code bundle with its ``airflow_stepop/__init__.py`` writing ``marker`` when imported:
    what a writer of the artifact root could plant in every job that runs the bundle."""
    line = f"\n__import__('pathlib').Path({str(marker)!r}).write_text('planted code ran')\n"
    source, out = zipfile.ZipFile(io.BytesIO(bundle)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as rewritten:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == "airflow_stepop/__init__.py":
                data += line.encode()
            rewritten.writestr(info, data)
    assert out.getvalue() != bundle
    return out.getvalue()


def test_a_code_bundle_rewritten_after_the_submit_never_runs(
    guide, tmp_path, monkeypatch, capfd, artifact_root
):
    """Whoever may write the artifact root rewrites the step's code bundle after the backend's
    create reached the service and before the job's process starts (the service's ``Job``
    rewrites it first). The job's command carries the digest the worker staged: the bootstrap
    refuses the bundle, and nothing of it runs (no marker, not the step)."""
    from airflow_stepop.backends.bootstrap import (
        BOOTSTRAP,
        BOOTSTRAP_ENV,
        CheckedFile,
        bootstrap_arguments,
        sha256_of,
    )

    marker, job_class, rewritten = tmp_path / "planted", guide.service_module.Job, []
    start = job_class.__init__

    def rewrite_then_start(self, name, command, env, labels):
        [bundle] = (artifact_root / "code").glob("*.zip")
        bundle.write_bytes(_with_marker(bundle.read_bytes(), marker))
        rewritten.append(bundle)
        start(self, name, command, env, labels)

    monkeypatch.setattr(job_class, "__init__", rewrite_then_start)
    # The service's jobs run in its directory, which `python -m` puts first on sys.path: not
    # this repository's, whose airflow_stepop would be imported instead of the bundle's.
    monkeypatch.chdir(tmp_path)
    run = _run_held(tmp_path, monkeypatch, "guide_once")
    logged = capfd.readouterr().out
    assert run.state == "failed", logged[-4000:]
    [job] = _jobs(guide.service, "once")
    [bundle] = rewritten
    assert (job.state, job.exit_code) == ("failed", 1)
    assert not marker.exists()  # the planted code never ran
    assert not (tmp_path / "started").exists()  # nor the step
    run_dir = Path(job.command[-1]).parent  # the job's spec is the runtime's one argument
    assert not (run_dir / "result.json").exists()
    said = f"stepop: {bundle} is not the file this job was submitted with (sha256 differs)"
    assert f"[{job.name}] {said}; nothing ran" in logged  # relayed into the task log

    # The planted code would have run: the same bootstrap, given the rewritten file's own
    # digest, imports it.
    planted = [CheckedFile("code.zip", str(bundle), sha256_of(bundle.read_bytes()))]
    done = subprocess.run(
        [sys.executable, *bootstrap_arguments(planted, ["-c", "import airflow_stepop"])],
        env={**os.environ, BOOTSTRAP_ENV: BOOTSTRAP, "TMPDIR": str(tmp_path)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert marker.read_text() == "planted code ran"


def test_a_job_of_the_name_that_another_try_started_is_not_attached_to(
    guide, tmp_path, monkeypatch, capfd
):
    """A job of the name this try asks for exists already, started by another try (a run
    deleted and triggered again with the same run_id, without a task state store to tell them
    apart; another Airflow on the same service). The service answers the create with 409, the
    backend sees another try's id on that job and raises ``JobNameTakenError``: the operator
    submits this try's job under another name and says so. The other job is left alone."""
    backend = guide.tinyjobs.TinyJobsBackend
    submit, asked = backend.submit, []

    def submit_after_another_try(self, request):
        if not asked:  # the other try's job, as the service keeps it: its labels say whose
            name = request.job_name.lower()
            labels = {**request.labels, "stepop_try": "another-try"}
            command = ["python", "-c", "print('the other try ran')"]
            guide.service.jobs[name] = guide.service_module.Job(name, command, {}, labels)
        asked.append(request)
        return submit(self, request)

    monkeypatch.setattr(backend, "submit", submit_after_another_try)
    run = _run_held(tmp_path, monkeypatch, "guide_once")
    logged = capfd.readouterr().out
    assert run.state == "success", logged[-4000:]
    other, ours = sorted(_jobs(guide.service, "once"), key=lambda job: job.created)
    assert [r.job_name for r in asked] == [other.name, ours.name]  # asked again, renamed
    assert ours.name.startswith(f"{other.name}-") and ours.labels["stepop_try"] == asked[0].try_id
    assert asked[0].try_id not in ("", "another-try")
    assert ours.state == "succeeded" and (tmp_path / "started").exists()
    assert _xcoms(run)[("once", "return_value")] == "ran"  # this try's result
    assert not other.cancelled and other.labels["stepop_try"] == "another-try"  # left alone
    assert (
        f"A job named {other.name} exists already and belongs to another try (Airflow task "
        f"instance id another-try), not this one: submitting this try's job as {ours.name}"
    ) in logged
    assert f"Submitted job {ours.name}" in logged


def test_a_create_whose_answer_was_lost_attaches_to_this_trys_own_job(guide, tmp_path):
    """The same try submits twice (its first create went through, the answer was lost): the
    409's job carries this try's id, so ``submit`` returns its handle and starts no second job.
    Another try asking for the name gets ``JobNameTakenError`` naming the owner."""
    from airflow_stepop.backends.base import JobNameTakenError, JobRequest

    run = tmp_path / "run"
    request = JobRequest(
        job_name="guide-lost-answer-t1",
        task_key="guide/lost/answer/-1",
        spec_uri=f"{run}/spec.json",
        run_uri=str(run),
        code_uri=f"{tmp_path}/code.zip",  # none: the job fails, which does not matter here
        try_id="this-try",
    )
    backend = guide.tinyjobs.TinyJobsBackend(guide.service.url)
    first = backend.submit(request)
    assert backend.submit(request) == first
    assert list(guide.service.jobs) == [first["job_id"]]
    with pytest.raises(JobNameTakenError) as taken:
        backend.submit(dataclasses.replace(request, try_id="another-try"))
    assert (taken.value.job_name, taken.value.owner) == (request.job_name, "this-try")
    assert list(guide.service.jobs) == [first["job_id"]]
