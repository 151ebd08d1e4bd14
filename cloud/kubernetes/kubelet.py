"""The kubelet: runs a pod bound to a node, on its own thread, through :mod:`cloud.runner`.

A pod goes: ``ContainerCreating`` (volumes and environment, waiting with ``FailedMount`` or
``CreateContainerConfigError`` while a Secret is missing) -> the image (``ErrImagePull``, then
``ImagePullBackOff`` while it cannot be pulled, retried with a doubling back-off of 1 s up to
20 s; the pod stays Pending, as on a cluster) -> ``Running`` (Created/Started events, the
container's output lines in its log with their times) -> ``Succeeded``/``Failed`` with the
container's ``terminated`` state (``Completed``, ``Error``, ``OOMKilled``, ``StartError``).
Only the first container of a pod runs (its others are neither run nor reported).

The first container's ``command`` + ``args`` run (``$(VAR)`` expanded), in ``workingDir``;
process mode for the plain base image, a container for any other image, and the pod label
``stepop_fake_mode`` (``process``, ``container``, ``timer``) picks one, as the other fakes'
label or tag does. A deleted pod's container gets SIGTERM and, after the grace period,
SIGKILL. Faults: ``evict`` (the pod fails ``Evicted`` with a ``DisruptionTarget`` condition,
exit 137), ``oom_kill`` (exit 137, ``OOMKilled``, an ``OOMKilling`` event on the node) and
``image_pull`` (the image cannot be pulled while the rule stands).
"""

from __future__ import annotations

import copy
import secrets
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cloud.kubernetes.api import JOBS, SECRETS, k8s_time
from cloud.kubernetes.conditions import set_condition
from cloud.kubernetes.events import NORMAL, WARNING
from cloud.kubernetes.podenv import (
    NotReady,
    container_env,
    container_mounts,
    expand,
    local_peers,
    peer_names,
    prepare_volumes,
)
from cloud.kubernetes.podspec import container_status, owner_uid
from cloud.kubernetes.state import PodRuntime
from cloud.kubernetes.termination import ContainerEnd
from cloud.runner import MODE_CONTAINER, MODE_PROCESS, JobLaunch, JobRun, LaunchError, NodeSpec

PULL_ERROR_SECONDS = 1.0  # ErrImagePull shows this long before ImagePullBackOff
PULL_BACKOFF = (1.0, 20.0)  # first and longest wait between pulls
MODE_LABEL = "stepop_fake_mode"


class Stop(Exception):
    """The pod was deleted (or the fake stops) before its container started."""


class StartFailure(Exception):
    """The container cannot start (the runner refused it): it ends as ``StartError``."""


class Kubelet(ContainerEnd):
    """Runs pods: one thread each, from binding to the container's end."""

    def start_pod(self, pod: dict[str, Any]) -> None:
        """Run a pod just bound to a node (caller holds the lock)."""
        meta = pod["metadata"]
        runtime = PodRuntime(
            meta["uid"], meta["namespace"], meta["name"], pod["spec"]["containers"][0]["name"]
        )
        self.pods[runtime.uid] = runtime
        threading.Thread(
            target=self._pod_life, args=(runtime,), daemon=True, name=f"kubelet-{meta['name']}"
        ).start()

    # --- the pod object ----------------------------------------------------------------------
    def _live(self, rt: PodRuntime) -> dict[str, Any]:
        """The pod, unless it was deleted (or the fake stops): then :class:`Stop`."""
        pod = self._current(rt)
        if pod is None or pod["metadata"].get("deletionTimestamp") or self.stopping.is_set():
            raise Stop
        return pod

    def _pause(self, rt: PodRuntime, seconds: float) -> None:
        """Wait ``seconds``, or less when the pod changes; :class:`Stop` if it was deleted."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            with self.lock:
                self.store.changed.wait(min(left, 0.5))
            self._live(rt)

    def _waiting(self, rt: PodRuntime, reason: str, message: str | None) -> None:
        state: dict[str, Any] = {"reason": reason}
        if message:
            state["message"] = message

        def wait(pod: dict[str, Any]) -> None:
            container = pod["spec"]["containers"][0]
            pod["status"]["containerStatuses"] = [container_status(container, {"waiting": state})]

        self._update(rt, wait)

    # --- the life -----------------------------------------------------------------------------
    def _pod_life(self, rt: PodRuntime) -> None:
        pod_dir = Path(tempfile.mkdtemp(prefix=f"stepop-kubernetes-{rt.name}-", dir=self.tmp_base))
        run: JobRun | None = None
        try:
            self._accept(rt)
            launch, mode = self._prepare(rt, pod_dir)
            run = self._start(rt, launch, mode, pod_dir)
            self.watch_container(rt, run)
        except StartFailure as exc:
            pod = self._current(rt)
            if pod is not None:
                self._kubelet_event(pod, WARNING, "Failed", f"Error: {exc}")
            self.terminate(rt, 128, "StartError", str(exc))
        except Stop:  # deleted before its container started: it ends Failed, never having run
            self._update(rt, _fail_pending)
        except Exception as exc:  # a bug of the fake: the pod fails, saying so
            traceback.print_exc(file=sys.stderr)
            self.terminate(rt, 1, "Error", f"kubernetes fake: {exc!r}")
        finally:
            if run is not None:
                self.runner.forget(run)
                run.cleanup()
            shutil.rmtree(pod_dir, ignore_errors=True)
            with self.lock:
                rt.log.ended = True
                self.store.changed.notify_all()

    def _accept(self, rt: PodRuntime) -> None:
        now = time.time()

        def accept(pod: dict[str, Any]) -> None:
            status, names = pod["status"], pod["spec"]["containers"][0]["name"]
            status.update(
                hostIP="127.0.0.1",
                hostIPs=[{"ip": "127.0.0.1"}],
                podIP="127.0.0.1",
                podIPs=[{"ip": "127.0.0.1"}],
                startTime=k8s_time(now),
            )
            conditions = status.setdefault("conditions", [])
            unready = ("ContainersNotReady", f"containers with unready status: [{names}]")
            set_condition(conditions, "PodReadyToStartContainers", "True", now=now)
            set_condition(conditions, "Initialized", "True", now=now)
            set_condition(conditions, "Ready", "False", *unready, now=now)
            set_condition(conditions, "ContainersReady", "False", *unready, now=now)
            status["containerStatuses"] = [
                container_status(
                    pod["spec"]["containers"][0], {"waiting": {"reason": "ContainerCreating"}}
                )
            ]

        self._update(rt, accept)

    def _secret_lookup(self, namespace: str) -> Callable[[str], dict[str, Any] | None]:
        def lookup(name: str) -> dict[str, Any] | None:
            with self.lock:
                found = self.store.get(SECRETS.resource, namespace, name)
                return copy.deepcopy(found) if found is not None else None

        return lookup

    def _prepare(self, rt: PodRuntime, pod_dir: Path) -> tuple[JobLaunch, str]:
        """Volumes, environment and image, retried until ready; the launch and its mode."""
        said: str | None = None
        backoff = PULL_BACKOFF[0]
        while True:
            pod = self._live(rt)
            container = pod["spec"]["containers"][0]
            lookup = self._secret_lookup(rt.namespace)
            try:
                dirs = prepare_volumes(pod, pod_dir, Path(self.data_dir), lookup)
                env = container_env(pod, container, lookup)
            except NotReady as wait:
                self._waiting(
                    rt, wait.reason, None if wait.reason == "ContainerCreating" else wait.message
                )
                if said != wait.message:
                    self._kubelet_event(pod, WARNING, *wait.event)
                    said = wait.message
                self._pause(rt, 1.0)
                continue
            image = container.get("image", "")
            try:
                mode = self.runner.mode_for(
                    image, (pod["metadata"].get("labels") or {}).get(MODE_LABEL)
                )
            except LaunchError as exc:
                raise StartFailure(str(exc)) from exc
            error = self._pull(pod, image, mode)
            if error is None:
                return self._launch(pod, container, env, dirs), mode
            self._waiting(rt, "ErrImagePull", error)
            self._kubelet_event(pod, WARNING, "Failed", f'Failed to pull image "{image}": {error}')
            self._kubelet_event(pod, WARNING, "Failed", "Error: ErrImagePull")
            self._pause(rt, PULL_ERROR_SECONDS)
            self._waiting(rt, "ImagePullBackOff", f'Back-off pulling image "{image}"')
            self._kubelet_event(pod, NORMAL, "BackOff", f'Back-off pulling image "{image}"')
            self._kubelet_event(pod, WARNING, "Failed", "Error: ImagePullBackOff")
            self._pause(rt, backoff)
            backoff = min(backoff * 2, PULL_BACKOFF[1])

    def _pull(self, pod: dict[str, Any], image: str, mode: str) -> str | None:
        """Pull the image; the error (as containerd words it) when it cannot be had."""
        policy = pod["spec"]["containers"][0].get("imagePullPolicy", "IfNotPresent")
        if policy == "Always":
            self._kubelet_event(pod, NORMAL, "Pulling", f'Pulling image "{image}"')
        fault = self.faults.take_job_fault("image_pull", image)
        if fault is not None:
            return str(
                fault.get("message")
                or (
                    f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": '
                    f'failed to resolve reference "{image}": {image}: not found'
                )
            )
        if mode == MODE_CONTAINER:
            started = time.monotonic()
            try:
                self.runner.pull(image)
            except Exception as exc:  # LaunchError, or no engine to pull with at all
                unpack = f'failed to pull and unpack image "{image}"'
                return f"rpc error: code = Unknown desc = {unpack}: {exc}"
            took = f"{time.monotonic() - started:.3f}s"
            if policy == "Always":
                self._kubelet_event(
                    pod,
                    NORMAL,
                    "Pulled",
                    f'Successfully pulled image "{image}" '
                    f"in {took} ({took} including waiting). Image size: 0 bytes.",
                )
                return None
        self._kubelet_event(
            pod, NORMAL, "Pulled", f'Container image "{image}" already present on machine'
        )
        return None

    def _launch(
        self,
        pod: dict[str, Any],
        container: dict[str, Any],
        env: dict[str, str],
        dirs: dict[str, str],
    ) -> JobLaunch:
        hostname = pod["spec"].get("hostname") or pod["metadata"]["name"]
        peers = peer_names(pod, self._job_hostnames(pod) or [hostname])
        return JobLaunch(
            fake="kubernetes",
            name=pod["metadata"]["name"],
            image=container.get("image", ""),
            entrypoint=[expand(a, env) for a in container["command"]]
            if container.get("command")
            else None,
            args=[expand(a, env) for a in container["args"]] if container.get("args") else None,
            env=env,
            mounts=container_mounts(container, dirs),
            workdir=container.get("workingDir"),
            nodes=[NodeSpec(hostname)],
            hosts=tuple(peers),
        )

    def _job_hostnames(self, pod: dict[str, Any]) -> list[str]:
        """``<job>-<i>`` of every index of the pod's Indexed Job (empty for another pod)."""
        with self.lock:
            uid = owner_uid(pod)
            job = next(
                (
                    j
                    for j in self.store.items(JOBS.resource, pod["metadata"]["namespace"])
                    if j["metadata"]["uid"] == uid
                ),
                None,
            )
        if job is None or job["spec"].get("completionMode") != "Indexed":
            return []
        return [f"{job['metadata']['name']}-{i}" for i in range(job["spec"]["completions"])]

    def _start(self, rt: PodRuntime, launch: JobLaunch, mode: str, pod_dir: Path) -> JobRun:
        pod = self._live(rt)
        if mode == MODE_PROCESS:
            launch.env = local_peers(launch.env, list(launch.hosts))

        def on_line(_node: NodeSpec, stream: str, line: str, ts: float) -> None:
            with self.lock:
                rt.log.append(stream, line, ts)
                self.store.changed.notify_all()

        try:
            run = self.runner.launch(
                launch, on_line=on_line, mode=mode, workdir=str(pod_dir / "run")
            )
        except LaunchError as exc:
            raise StartFailure(str(exc)) from exc
        started = time.time()
        container_id = f"containerd://{secrets.token_hex(32)}"
        with self.lock:
            rt.ran = ran_record(rt, pod, launch, mode, started, container_id)
            self.ran.append(rt.ran)
        self._kubelet_event(pod, NORMAL, "Created", f"Created container: {rt.container}")
        self._kubelet_event(pod, NORMAL, "Started", f"Started container {rt.container}")

        def running(p: dict[str, Any]) -> None:
            status, container = p["status"], p["spec"]["containers"][0]
            status["phase"] = "Running"
            status["containerStatuses"] = [
                container_status(
                    container,
                    {"running": {"startedAt": k8s_time(started)}},
                    ready=True,
                    container_id=container_id,
                )
            ]
            for kind in ("Ready", "ContainersReady"):
                set_condition(status["conditions"], kind, "True", now=started)

        self._update(rt, running)
        return run


def _fail_pending(pod: dict[str, Any]) -> None:
    if pod["status"].get("phase") == "Pending":
        pod["status"]["phase"] = "Failed"
    pod["metadata"]["deletionGracePeriodSeconds"] = 0  # nothing runs: the deletion can end


def ran_record(
    rt: PodRuntime,
    pod: dict[str, Any],
    launch: JobLaunch,
    mode: str,
    started: float,
    container_id: str,
) -> dict[str, Any]:
    """What ``GET /_fake/ran`` lists of a started container (the end is filled in later)."""
    owners = pod["metadata"].get("ownerReferences") or []
    return {
        "namespace": rt.namespace,
        "pod": rt.name,
        "uid": rt.uid,
        "job": next((r["name"] for r in owners if r.get("kind") == "Job"), None),
        "node": pod["spec"].get("nodeName"),
        "hostname": launch.nodes[0].host,
        "image": launch.image,
        "mode": mode,
        "command": launch.entrypoint,
        "args": launch.args,
        "env": launch.env,
        "workingDir": launch.workdir,
        "mounts": [m.container_path for m in launch.mounts],
        "started": started,
        "finished": None,
        "exitCode": None,
        "reason": None,
        "containerID": container_id,
    }
