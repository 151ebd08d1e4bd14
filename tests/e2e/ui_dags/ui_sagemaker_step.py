"""One SageMaker step on the emulated cloud that prints, then holds until the test releases it.

The browser test looks at the task while it is deferred (links, relayed log lines), releases the
job by creating the file it waits for, and looks again after the run.
"""

from __future__ import annotations

import os

from airflow.sdk import dag, task

IMAGE = os.environ.get("STEPOP_UI_IMAGE", "127.0.0.1:5000/stepop-base/python:3.11-bookworm")


@dag(schedule=None, tags=["airflow-stepop", "ui-test"])
def ui_sagemaker_step():
    @task.sagemaker_step(image_uri=IMAGE)
    def train(release: str) -> dict:
        import time
        from pathlib import Path

        for epoch in range(3):
            print(f"epoch {epoch}: loss {1.0 / (epoch + 1):.3f}", flush=True)
        print("waiting for the test to release the job", flush=True)
        deadline = time.monotonic() + 600
        while not Path(release).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        return {"accuracy": 0.97, "epochs": 3}

    train(os.environ.get("STEPOP_UI_RELEASE", "/nonexistent"))


ui_sagemaker_step()
