"""The step cache end to end on the local backend, through dag.test() with real jobs."""

from __future__ import annotations

import importlib
import json
import shutil
import sys
import time
from pathlib import Path

from tests.e2e.test_local_steps import _xcom_rows


def _dag():
    sys.modules.pop("cache_dags", None)
    return importlib.import_module("cache_dags").pipeline


def _jobs(jobs_dir) -> dict[str, int]:
    """Jobs made so far, per task."""
    counts: dict[str, int] = {}
    for record in jobs_dir.glob("*/job.json"):
        task = json.loads(record.read_text())["task_key"].split("/")[2]
        counts[task] = counts.get(task, 0) + 1
    return counts


def _results(run_id: str) -> dict[str, object]:
    rows = _xcom_rows("cached_pipeline")
    return {task: value for (task, key, _), value in rows.items() if key == "return_value"}


def test_an_unchanged_rerun_makes_no_job_and_a_changed_param_reruns_its_step_and_downstream(
    results, artifact_root, tmp_path, capfd
):
    jobs_dir = tmp_path / "jobs"
    dag = _dag()
    first = dag.test()
    assert first.state == "success"
    assert _jobs(jobs_dir) == {"prepare": 1, "train": 1, "evaluate": 1, "report": 1,
                               "plain_rows": 1}  # fmt: skip
    made = _results(first.run_id)

    second = _dag().test()
    assert second.state == "success"
    # only the step with cache=False ran again; the rest returned the first run's references
    assert _jobs(jobs_dir) == {"prepare": 1, "train": 1, "evaluate": 1, "report": 2,
                               "plain_rows": 1}  # fmt: skip
    assert _results(second.run_id)["prepare"] == made["prepare"]  # same uri, same sha256
    log = capfd.readouterr()
    assert "Step cache hit: returning the result of job cached-pipeline-train-" in log.out + log.err

    third = _dag().test(run_conf={"scale": 3})
    assert third.state == "success"
    # train reads params: it ran again, and evaluate downstream of it; prepare did not
    assert _jobs(jobs_dir) == {"prepare": 1, "train": 2, "evaluate": 2, "report": 3,
                               "plain_rows": 1}  # fmt: skip


def _probe():
    sys.modules.pop("cache_dags", None)
    return importlib.import_module("cache_dags").probe


def test_each_reason_an_entry_cannot_be_used_runs_the_job_again_and_says_why(
    results, artifact_root, tmp_path, capfd
):
    jobs_dir = tmp_path / "jobs"

    def run_and_log() -> str:
        assert _probe().test().state == "success"
        seen = capfd.readouterr()
        return seen.out + seen.err

    run_and_log()
    [entry_file] = (artifact_root / "cache" / "cache_probe").glob("*.json")
    [first_job] = [p.name for p in jobs_dir.iterdir()]
    assert "Step cache hit" in run_and_log() and _jobs(jobs_dir) == {"double": 1}

    def rewrite_entry(**fields) -> None:
        entry = json.loads(entry_file.read_text())
        entry_file.write_text(json.dumps({**entry, **fields}))

    def output() -> Path:
        entry = json.loads(entry_file.read_text())
        [uri] = entry["outputs"]
        return Path(uri.removeprefix("file://"))

    # 1. the result's artifact rewritten in the store (same size, other bytes)
    data = output().read_bytes()
    output().write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert "changed since it was cached" in run_and_log()
    assert _jobs(jobs_dir) == {"double": 2}

    # 2. the artifact deleted
    output().unlink()
    assert "is gone" in run_and_log()
    assert _jobs(jobs_dir) == {"double": 3}

    # 3. an entry older than cache_expires_after (7 days)
    rewrite_entry(created_at=time.time() - 8 * 24 * 3600)
    assert "the entry expired" in run_and_log()
    assert _jobs(jobs_dir) == {"double": 4}

    # 4. an entry pointed at another job (a job that ran another key, here the first one,
    # whose output was since rewritten: it is the spec's key that refuses it)
    latest = json.loads(entry_file.read_text())["job_id"]
    rewrite_entry(job_id=first_job)
    assert f"the entry does not match the service's record of job {first_job}" in run_and_log()
    assert _jobs(jobs_dir) == {"double": 5}

    # 5. the spec the job ran changed in the store after it ran
    latest = json.loads(entry_file.read_text())["job_id"]
    record = json.loads((jobs_dir / latest / "job.json").read_text())
    spec = Path(record["run_uri"].removeprefix("file://")) / "spec.json"
    spec.write_text(spec.read_text() + " ")  # the same JSON, other bytes
    assert "was changed after the job was created" in run_and_log()
    assert _jobs(jobs_dir) == {"double": 6}

    # 6. the job's result manifest rewritten (an inline value changed, say)
    latest = json.loads(entry_file.read_text())["job_id"]
    record = json.loads((jobs_dir / latest / "job.json").read_text())
    manifest = Path(record["run_uri"].removeprefix("file://")) / "result.json"
    manifest.write_text(manifest.read_text() + " ")
    assert f"the result manifest of job {latest} changed since it was cached" in run_and_log()
    assert _jobs(jobs_dir) == {"double": 7}

    # 7. the service (here the local jobs directory) no longer knows the job
    latest = json.loads(entry_file.read_text())["job_id"]
    shutil.rmtree(jobs_dir / latest)
    assert f"the job that made the result, {latest}, is gone" in run_and_log()


def test_the_readme_cached_dag_makes_its_jobs_once_but_the_uncached_step_s(
    results, artifact_root, tmp_path, monkeypatch, capfd
):
    from tests.doc_blocks import run_dag_block

    bundles = [{"name": "dags-folder", "kwargs": {},
                "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle"}]  # fmt: skip
    for _ in range(2):
        run = run_dag_block("README.md", "cached_features", tmp_path, monkeypatch, bundles)
        assert run.state == "success"
    assert _jobs(tmp_path / "jobs") == {"featurize": 1, "fit": 1, "publish": 2}
    log = capfd.readouterr()
    assert "Step cache hit: returning the result of job cached-features-fit-" in log.out + log.err
