"""The Azure ML fake's MLflow tracking server: each job is an MLflow run of its experiment.

Azure ML makes every job an MLflow run and sets, in the job's environment, what MLflow needs to
log into it: ``MLFLOW_TRACKING_URI`` (the workspace's tracking URI), ``MLFLOW_RUN_ID`` (the job
name), ``MLFLOW_EXPERIMENT_ID``/``MLFLOW_EXPERIMENT_NAME`` (the job's experiment) and
``MLFLOW_TRACKING_TOKEN`` (a token scoped to the run). So ``mlflow.log_metric(...)`` in the job
logs into the job's run, with no set-up.

The service's tracking URI is ``azureml://<region>.api.azureml.ms/mlflow/v1.0/<workspace id>``,
which MLflow reads through the ``azureml-mlflow`` plugin as
``https://<region>.api.azureml.ms/mlflow/v1.0/<workspace id>``. The fake serves the same
path (``{fake}/mlflow/v1.0/<workspace id>``) and gives jobs that http URL, so plain MLflow (no
plugin) reaches it. The MLflow REST API under it (``/api/2.0/mlflow/``), the calls a step makes
when it logs into its run and those that read the results:

``GET  experiments/get``, ``experiments/get-by-name``, ``POST experiments/search``
``GET  runs/get``; ``POST runs/update``, ``runs/log-metric``, ``runs/log-parameter``,
``runs/set-tag``, ``runs/log-batch``, ``runs/search`` (by experiment)
``GET  metrics/get-history``

Anything else answers 404 ``ENDPOINT_NOT_FOUND``, as an MLflow server does for an unknown route.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from typing import Any

from cloud.fake_http import Request, Response, Router

API = r"/api/2\.0/mlflow"


def _ms(seconds: float | None = None) -> int:
    return int((time.time() if seconds is None else seconds) * 1000)


def _mlflow_error(status: int, code: str, message: str) -> Response:
    return Response(status, {"error_code": code, "message": message})


class Tracking:
    """Experiments and runs of every workspace of the fake, as MLflow's REST API shows them."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.experiments: dict[str, dict[str, Any]] = {}  # experiment id -> experiment
        self.runs: dict[str, dict[str, Any]] = {}  # run id (the job name) -> run

    def add_routes(self, router: Router, ws: str) -> None:
        base = rf"/mlflow/v1\.0{ws}{API}"
        routes = [
            ("GET", "experiments/get", self.get_experiment),
            ("GET", "experiments/get-by-name", self.get_experiment_by_name),
            ("POST", "experiments/search", self.search_experiments),
            ("GET", "runs/get", self.get_run),
            ("POST", "runs/update", self.update_run),
            ("POST", "runs/log-metric", self.log_metric),
            ("POST", "runs/log-parameter", self.log_param),
            ("POST", "runs/set-tag", self.set_tag),
            ("POST", "runs/log-batch", self.log_batch),
            ("POST", "runs/search", self.search_runs),
            ("GET", "metrics/get-history", self.metric_history),
        ]
        for method, path, handler in routes:
            name = "MLflow_" + "".join(p.title() for p in re.split(r"[/-]", path))
            router.add(method, rf"{base}/{path}", name, self._guard(handler))
        router.add("GET", rf"{base}/.*", "MLflow_Unknown", self.unknown)
        router.add("POST", rf"{base}/.*", "MLflow_Unknown", self.unknown)

    @staticmethod
    def tracking_path(ws_id: str) -> str:
        return f"/mlflow/v1.0{ws_id}"

    # --- what the job service calls ------------------------------------------------------
    def create_run(self, ws_id: str, run_id: str, experiment: str, run_name: str) -> str:
        """The run of a new job (under its experiment, made on first use); the experiment id."""
        with self._lock:
            exp_id = str(
                uuid.uuid5(uuid.NAMESPACE_URL, f"{ws_id.lower()}/experiments/{experiment}")
            )
            self.experiments.setdefault(
                exp_id,
                {
                    "experiment_id": exp_id,
                    "name": experiment,
                    "artifact_location": f"azureml://experiments/{experiment}",
                    "lifecycle_stage": "active",
                    "creation_time": _ms(),
                    "last_update_time": _ms(),
                    "tags": [],
                },
            )
            self.runs[run_id] = {
                "info": {
                    "run_id": run_id,
                    "run_uuid": run_id,
                    "run_name": run_name,
                    "experiment_id": exp_id,
                    "user_id": "stepop-fake",
                    "status": "SCHEDULED",
                    "start_time": _ms(),
                    "artifact_uri": f"azureml://experiments/{experiment}/runs/{run_id}/artifacts",
                    "lifecycle_stage": "active",
                },
                "metrics": {},  # key -> [{key, value, timestamp, step}]
                "params": {},
                "tags": {"mlflow.runName": run_name},
            }
            return exp_id

    def job_environment(self, base_url: str, ws_id: str, run_id: str) -> dict[str, str]:
        """The MLflow variables Azure ML sets in a job's environment."""
        with self._lock:
            exp_id = self.runs[run_id]["info"]["experiment_id"]
            name = self.experiments[exp_id]["name"]
        return {
            "MLFLOW_TRACKING_URI": base_url + self.tracking_path(ws_id),
            "MLFLOW_RUN_ID": run_id,
            "MLFLOW_EXPERIMENT_ID": exp_id,
            "MLFLOW_EXPERIMENT_NAME": name,
            "MLFLOW_TRACKING_TOKEN": f"fake-run-token-{run_id}",
        }

    def clear(self) -> None:
        with self._lock:
            self.experiments.clear()
            self.runs.clear()

    # --- the REST API --------------------------------------------------------------------
    def _guard(self, handler: Any) -> Any:
        def guarded(req: Request) -> Response:
            try:
                return handler(req)
            except KeyError as exc:
                return _mlflow_error(404, "RESOURCE_DOES_NOT_EXIST", f"Not found: {exc.args[0]}")
            except (TypeError, ValueError) as exc:
                return _mlflow_error(400, "INVALID_PARAMETER_VALUE", str(exc))

        return guarded

    def unknown(self, req: Request) -> Response:
        return _mlflow_error(404, "ENDPOINT_NOT_FOUND", f"No API endpoint {req.path}")

    def _body(self, req: Request) -> dict[str, Any]:
        body = req.json() or {}
        if not isinstance(body, dict):
            raise ValueError("The request body must be a JSON object.")
        return body

    def _run(self, run_id: Any) -> dict[str, Any]:
        if not run_id:
            raise ValueError("Missing value for required parameter 'run_id'.")
        with self._lock:
            if run_id not in self.runs:
                raise KeyError(f"Run '{run_id}'")
            return self.runs[run_id]

    def _render_run(self, run: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            latest = [history[-1] for history in run["metrics"].values()]
            return {
                "info": dict(run["info"]),
                "data": {
                    "metrics": latest,
                    "params": [{"key": k, "value": v} for k, v in run["params"].items()],
                    "tags": [{"key": k, "value": v} for k, v in run["tags"].items()],
                },
                "inputs": {},
            }

    def get_experiment(self, req: Request) -> Response:
        with self._lock:
            return Response(200, {"experiment": self.experiments[req.arg("experiment_id") or ""]})

    def get_experiment_by_name(self, req: Request) -> Response:
        name = req.arg("experiment_name")
        with self._lock:
            for exp in self.experiments.values():
                if exp["name"] == name:
                    return Response(200, {"experiment": exp})
        return _mlflow_error(404, "RESOURCE_DOES_NOT_EXIST", f"Experiment '{name}' not found.")

    def search_experiments(self, req: Request) -> Response:
        with self._lock:
            return Response(200, {"experiments": list(self.experiments.values())})

    def get_run(self, req: Request) -> Response:
        return Response(200, {"run": self._render_run(self._run(req.arg("run_id")))})

    def update_run(self, req: Request) -> Response:
        body = self._body(req)
        run = self._run(body.get("run_id") or body.get("run_uuid"))
        with self._lock:
            for field in ("status", "end_time", "run_name"):
                if body.get(field) is not None:
                    run["info"][field] = body[field]
            return Response(200, {"run_info": dict(run["info"])})

    def _metric(self, run: dict[str, Any], metric: dict[str, Any]) -> None:
        entry = {
            "key": str(metric["key"]),
            "value": float(metric["value"]),
            "timestamp": int(metric.get("timestamp") or _ms()),
            "step": int(metric.get("step") or 0),
        }
        with self._lock:
            run["metrics"].setdefault(entry["key"], []).append(entry)

    def log_metric(self, req: Request) -> Response:
        body = self._body(req)
        self._metric(self._run(body.get("run_id") or body.get("run_uuid")), body)
        return Response(200, {})

    def log_param(self, req: Request) -> Response:
        body = self._body(req)
        run = self._run(body.get("run_id") or body.get("run_uuid"))
        with self._lock:
            run["params"][str(body["key"])] = str(body["value"])
        return Response(200, {})

    def set_tag(self, req: Request) -> Response:
        body = self._body(req)
        run = self._run(body.get("run_id") or body.get("run_uuid"))
        with self._lock:
            run["tags"][str(body["key"])] = str(body["value"])
        return Response(200, {})

    def log_batch(self, req: Request) -> Response:
        body = self._body(req)
        run = self._run(body.get("run_id"))
        for metric in body.get("metrics") or []:
            self._metric(run, metric)
        with self._lock:
            for param in body.get("params") or []:
                run["params"][str(param["key"])] = str(param["value"])
            for tag in body.get("tags") or []:
                run["tags"][str(tag["key"])] = str(tag["value"])
        return Response(200, {})

    def search_runs(self, req: Request) -> Response:
        wanted = set(self._body(req).get("experiment_ids") or [])
        with self._lock:
            found = [r for r in self.runs.values() if r["info"]["experiment_id"] in wanted]
        return Response(200, {"runs": [self._render_run(r) for r in found]})

    def metric_history(self, req: Request) -> Response:
        run = self._run(req.arg("run_id") or req.arg("run_uuid"))
        with self._lock:
            return Response(200, {"metrics": list(run["metrics"].get(req.arg("metric_key"), []))})
