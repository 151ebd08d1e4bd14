"""The step cache on the emulated Azure ML: a DAG with default_args={"cache": True} run through
dag.test() twice (an unchanged rerun), then once more after a cached artifact was rewritten in
Blob storage (a miss the task log explains)."""

from __future__ import annotations

import io
import re
from collections import Counter

from tests.integration.azureml.conftest import dags, jobs, xcoms


def _jobs_made(fake) -> dict[str, int]:
    """Azure ML jobs created so far for aml_cached, per task."""
    names = [job["name"] for job in jobs(fake, "aml-cached-")]
    return dict(Counter(re.match(r"aml-cached-([a-z]+)-", name).group(1) for name in names))


def test_an_unchanged_rerun_makes_no_job_and_a_rewritten_artifact_reruns_its_step(
    azure, ctl, capfd
):
    import numpy

    first = dags().aml_cached().test()
    assert first.state == "success"
    assert _jobs_made(azure["fake"]) == {"make": 1, "total": 1, "stamp": 1}
    made = xcoms(first)
    array = made[("make", "return_value", -1)]["__data__"]
    assert array["materializer"] == "numpy" and array["uri"].startswith(azure["root"] + "/")

    second = dags().aml_cached().test()
    assert second.state == "success"
    # stamp has cache=False: it always runs; make and total made no job
    assert _jobs_made(azure["fake"]) == {"make": 1, "total": 1, "stamp": 2}
    reused = xcoms(second)
    assert reused[("make", "return_value", -1)] == made[("make", "return_value", -1)]  # uri, sha256
    assert reused[("total", "return_value", -1)] == made[("total", "return_value", -1)] == 499500
    assert type(reused[("total", "return_value", -1)]) is type(made[("total", "return_value", -1)])
    assert reused[("stamp", "return_value", -1)] == "total 499500"
    billing = reused[("make", "azureml_billing", -1)]
    assert billing["cache_hit"] is True and billing["estimated_cost_usd"] == 0
    assert billing["original_job"] == made[("make", "azureml_billing", -1)]["job_name"]
    out, err = capfd.readouterr()
    assert (out + err).count("Step cache hit: returning the result of job aml-cached-") == 2

    # whoever may write the container rewrites make's array, same size, other bytes: make's
    # entry no longer matches its artifact, so make runs again
    wrong = io.BytesIO()
    numpy.save(wrong, numpy.arange(1000, dtype="float64") * 2)
    blob = array["uri"].split("/", 3)[3]
    assert len(wrong.getvalue()) == azure["blobs"].get_blob_client(blob).get_blob_properties().size
    azure["blobs"].upload_blob(blob, wrong.getvalue(), overwrite=True)

    third = dags().aml_cached().test()
    assert third.state == "success"
    out, err = capfd.readouterr()
    assert f"Step cache miss: the result's artifact {array['uri']} changed since it was cached" in (
        out + err
    )
    # make ran again (a new array, with the bytes it makes, in this run's directory); total's key
    # takes its input by content, so total still made no job; stamp ran a third time
    assert _jobs_made(azure["fake"]) == {"make": 2, "total": 1, "stamp": 3}
    again = xcoms(third)
    remade = again[("make", "return_value", -1)]["__data__"]
    assert remade["uri"] != array["uri"] and remade["sha256"] == array["sha256"]
    assert again[("total", "return_value", -1)] == 499500
    assert again[("stamp", "return_value", -1)] == "total 499500"
