"""Local and SageMaker steps in one DAG: each step's job reads only its own store, so the worker
carries an artifact from the other store into the step's run, checked against its digest."""

from __future__ import annotations

import importlib
import json
import re
import sys


def test_artifacts_travel_between_a_local_and_a_sagemaker_step(aws, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ARTIFACT_ROOT", aws["root"])
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", f"file://{tmp_path}/artifacts")
    monkeypatch.setenv("AIRFLOW__STEPOP__LOCAL_JOBS_DIR", str(tmp_path / "jobs"))
    sys.modules.pop("sagemaker_mixed_dags", None)
    dags = importlib.import_module("sagemaker_mixed_dags")

    run = dags.mixed_local_and_sagemaker().test()

    assert run.state == "success"
    kept = json.loads((aws["results"] / "mixed.json").read_text())
    assert kept["score"] == 2.0 * sum(range(100_000))
    assert kept["uri"].startswith(aws["root"] + "/")  # the SageMaker step's result stayed in S3
    listing = aws["s3"].list_objects_v2(Bucket=aws["bucket"], Prefix=aws["root"].split("/", 3)[3])
    names = [item["Key"] for item in listing.get("Contents", [])]
    carried = [name for name in names if re.search(r"/train/-1/[0-9a-f]{12}/1/inputs/", name)]
    assert carried and carried[0].endswith("/return_value.npy"), names  # the local step's result
    # and the SageMaker step's result, read with aws_default, into the local step's run
    evaluate_run = "mixed_local_and_sagemaker/*/evaluate/-1/*/1"  # <instance>/<try>
    assert list((tmp_path / "artifacts").glob(f"{evaluate_run}/inputs/*/return_value.npy"))
