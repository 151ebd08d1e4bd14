"""The Airflow UI in a real browser: a deferred SageMaker step on the emulated cloud.

Airflow's services run as processes (api-server, scheduler with the LocalExecutor, dag-processor,
triggerer) on a private PostgreSQL, as docker-compose.yaml runs them. Headless Debian chromium,
driven by Playwright (no browser download), looks at the task instance page while the step is
deferred (state, the "Step job"/"Step logs" links, the job's own lines relayed into the log) and
after the run (the result and the billing line). Screenshots go to ``$STEPOP_TEST_ARTIFACTS``
(default: the test's tmp dir).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_stepop.backends.sagemaker.job import console_links
from cloud.pytest_plugin import cloud_stack, registry_image  # noqa: F401 - fixtures
from tests.e2e.services import Api, airflow_deployment
from tests.waiting import wait_for

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DAG = "ui_sagemaker_step"
TASK = "train"
ROLE = "arn:aws:iam::123456789012:role/stepop"


@pytest.fixture(scope="module")
def deployment(cloud_stack: dict[str, str], registry_image: str) -> Iterator[dict[str, Any]]:  # noqa: F811
    """The services on a private PostgreSQL, configured for SageMaker on the emulated cloud."""
    base = Path(tempfile.mkdtemp(prefix="stepop-ui-"))
    base.chmod(0o755)  # the PostgreSQL server runs as `postgres` when we are root
    bucket = cloud_stack.get("STEPOP_DEMO_BUCKET", "stepop-demo")
    extra = {
        **{k: v for k, v in cloud_stack.items() if k != "STEPOP_CLOUD_DIR"},
        "AIRFLOW__STEPOP__ARTIFACT_ROOT": f"s3://{bucket}/ui-{uuid.uuid4().hex[:8]}",
        "AIRFLOW__STEPOP__SAGEMAKER_ROLE": ROLE,
        "AIRFLOW__STEPOP__POLL_INTERVAL": "1",
        "STEPOP_UI_IMAGE": registry_image,
        "STEPOP_UI_RELEASE": str(base / "release"),
    }
    try:
        dags = Path(__file__).parent / "ui_dags"
        with airflow_deployment(base, dags, extra) as (api, _):
            wait_for(lambda: api.get(f"/api/v2/dags/{DAG}"), 120, f"the DAG {DAG}",
                     tolerate=(OSError,), interval=0.5)  # fmt: skip
            yield {"api": api, "release": base / "release"}
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    """Where screenshots go: $STEPOP_TEST_ARTIFACTS (CI keeps it), else the test's tmp dir."""
    out = Path(os.environ.get("STEPOP_TEST_ARTIFACTS", tmp_path / "artifacts"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_deferred_sagemaker_step_in_the_ui(deployment: dict[str, Any], artifacts: Path) -> None:
    from playwright.sync_api import Page, expect, sync_playwright

    api: Api = deployment["api"]
    api.patch(f"/api/v2/dags/{DAG}", {"is_paused": False})
    run_id = api.post(f"/api/v2/dags/{DAG}/dagRuns", {"logical_date": None})["dag_run_id"]
    ti_path = f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances/{TASK}"

    def state_is(state: str) -> bool:
        return api.get(ti_path)["state"] == state

    wait_for(lambda: state_is("deferred"), 180, "the step to defer", interval=0.5)
    links = wait_for(lambda: _links(api, ti_path), 60, "the step's links", interval=0.5)
    job = links["Step job"].rsplit("/", 1)[1]
    console = console_links("us-east-1", job)  # the AWS console's job and CloudWatch pages
    assert (links["Step job"], links["Step logs"]) == (console["job"], console["logs"])

    def shows(page: Page, text: str | re.Pattern[str], timeout: float = 60_000) -> None:
        expect(page.get_by_text(text).first).to_be_visible(timeout=timeout)

    page_url = f"{api.base}/dags/{DAG}/runs/{urllib.parse.quote(run_id)}/tasks/{TASK}"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(page_url)
            shows(page, re.compile(r"^Deferred$"), 30_000)
            # the extra links are on the task instance's Details tab
            page.get_by_role("link", name="Details", exact=True).click()
            shows(page, "Extra Links", 30_000)
            for name in ("Step job", "Step logs"):
                link = page.get_by_role("link", name=name, exact=True)
                expect(link).to_have_attribute("href", links[name], timeout=30_000)
            page.screenshot(path=str(artifacts / "ui-deferred-links.png"))

            # the job's own lines, relayed into the task log by the trigger while deferred
            page.get_by_role("link", name="Logs", exact=True).click()
            shows(page, f"[{job}] epoch 2: loss 0.333", 90_000)
            shows(page, f"[{job}] waiting for the test to release the job")
            page.screenshot(path=str(artifacts / "ui-deferred-step.png"))

            deployment["release"].touch()
            wait_for(lambda: state_is("success"), 180, "the step to succeed", interval=0.5)
            page.reload()
            shows(page, re.compile(r"^Success$"), 30_000)
            shows(page, f"[{job}] [stepop] step finished in")
            shows(page, f"Step job {job} succeeded; result: {{'accuracy': 0.97, 'epochs': 3}}")
            # the finished job's billing line: billable seconds and the estimated cost
            shows(
                page,
                re.compile(
                    rf"Job {job}: \d+ billable s x 1 x ml\.m5\.large = about "
                    r"(\$\d+\.\d{4}|<\$0\.0001)"
                ),
            )
            page.screenshot(path=str(artifacts / "ui-finished-step.png"))
        except Exception:
            (artifacts / "page.html").write_text(page.content())
            page.screenshot(path=str(artifacts / "failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    xcom = api.get(f"{ti_path}/xcomEntries/return_value")
    value = json.loads(xcom["value"]) if isinstance(xcom["value"], str) else xcom["value"]
    assert value == {"accuracy": 0.97, "epochs": 3}


def _links(api: Api, ti_path: str) -> dict[str, str] | None:
    links = api.get(f"{ti_path}/links")
    links = links.get("extra_links", links) if isinstance(links, dict) else links
    return links if links.get("Step job") and links.get("Step logs") else None
