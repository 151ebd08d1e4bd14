"""The step cache on the emulated Vertex AI: a DAG with default_args={"cache": True} run twice
through dag.test(), then one of its cached artifacts rewritten in GCS (no third run: the Azure
ML test runs the miss that follows; here the stamps it is told by)."""

from __future__ import annotations

import io
import json
from collections import Counter

from tests.integration.vertex.conftest import custom_jobs, dags, xcoms


def _jobs_made(fake: str) -> dict[str, int]:
    """CustomJobs created so far for vx_cached, per task."""
    return dict(Counter(j["labels"]["airflow_task_id"] for j in custom_jobs(fake, "vx-cached")))


def test_an_unchanged_rerun_makes_no_job_and_returns_the_same_references(gcp, ctl, capfd):
    import numpy

    from airflow_stepop.artifacts.fingerprint import fingerprint
    from airflow_stepop.artifacts.storage import worker_storage

    first = dags().vx_cached().test()
    assert first.state == "success"
    assert _jobs_made(gcp["fake"]) == {"make": 1, "total": 1, "stamp": 1}
    made = xcoms(first)
    array = made[("make", "return_value", -1)]["__data__"]
    assert array["materializer"] == "numpy" and array["uri"].startswith(gcp["root"] + "/")

    second = dags().vx_cached().test()
    assert second.state == "success"
    # stamp has cache=False: it always runs; make and total made no job
    assert _jobs_made(gcp["fake"]) == {"make": 1, "total": 1, "stamp": 2}
    assert ctl.counters()["CreateCustomJob"] == 4
    reused = xcoms(second)
    assert reused[("make", "return_value", -1)] == made[("make", "return_value", -1)]  # uri, sha256
    assert reused[("total", "return_value", -1)] == made[("total", "return_value", -1)] == 499500
    assert type(reused[("total", "return_value", -1)]) is type(made[("total", "return_value", -1)])
    assert reused[("stamp", "return_value", -1)] == "total 499500"
    billing = reused[("make", "vertex_billing", -1)]
    assert billing["cache_hit"] is True and billing["estimated_cost_usd"] == 0
    (make_job,) = [j for j in custom_jobs(gcp["fake"]) if j["labels"]["airflow_task_id"] == "make"]
    assert billing["original_job"] == make_job["name"].rsplit("/", 1)[-1]
    out, err = capfd.readouterr()
    assert (out + err).count("Step cache hit: returning the result of job vx-cached-") == 2

    # make's entry, <root>/cache/vx_cached/<key>.json, holds its array's GCS stamps; whoever may
    # write the bucket rewrites the array (same size, other bytes) and the stamps differ, so
    # the next run's make would miss ("changed since it was cached") and run again
    bucket = gcp["gcs"].bucket(gcp["bucket"])
    prefix = gcp["root"].removeprefix(f"gs://{gcp['bucket']}/")
    entries = [
        json.loads(blob.download_as_bytes())
        for blob in bucket.list_blobs(prefix=f"{prefix}/cache/vx_cached/")
    ]
    assert len(entries) == 2  # make's and total's; stamp keeps none
    (entry,) = [e for e in entries if array["uri"] in e["outputs"]]
    storage = worker_storage("google_cloud_default")
    assert fingerprint(storage, array["uri"]) == entry["outputs"][array["uri"]]
    wrong = io.BytesIO()
    numpy.save(wrong, numpy.arange(1000, dtype="float64") * 2)
    blob = bucket.blob(array["uri"].removeprefix(f"gs://{gcp['bucket']}/"))
    blob.reload()
    assert len(wrong.getvalue()) == blob.size
    blob.upload_from_string(wrong.getvalue())
    assert fingerprint(storage, array["uri"]) not in (entry["outputs"][array["uri"]], None)
