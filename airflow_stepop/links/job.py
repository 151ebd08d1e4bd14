"""Console links for step jobs: the operator stores URLs in XCom, the UI reads them there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey


class _StoredLink(BaseOperatorLink):
    kind = ""  # the key of backend.links() this link shows

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        # At the end of a task, Airflow's Task Runner asks for every declared link; asking for
        # one never stored (the step failed before its job existed, or the job has no
        # experiment) would log "XCom not found" at ERROR beside the step's real error. The
        # operator in that process knows what it stored; elsewhere (the UI) it is None.
        stored = getattr(operator, "stored_link_kinds", None)
        if stored is not None and self.kind not in stored:
            return ""
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(key=self.xcom_key, ti_key=ti_key) or ""


class StepJobLink(_StoredLink):
    name = "Step job"
    kind = "job"


class StepLogsLink(_StoredLink):
    name = "Step logs"
    kind = "logs"


class StepExperimentLink(_StoredLink):
    """The experiment (Vertex AI Experiments, an Azure ML experiment) the step's run is under."""

    name = "Step experiment"
    kind = "experiment"


LINKS: tuple[type[_StoredLink], ...] = (StepJobLink, StepLogsLink, StepExperimentLink)


def persist_links(context: Any, links: dict[str, str]) -> frozenset[str]:
    """Store a backend's links so they work while the task is deferred: the kinds stored."""
    stored = set()
    for link in LINKS:
        if url := links.get(link.kind):
            context["ti"].xcom_push(key=link().xcom_key, value=url)
            stored.add(link.kind)
    return frozenset(stored)
