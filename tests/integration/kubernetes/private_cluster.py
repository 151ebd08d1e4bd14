"""A Kubernetes fake of a test module's own, for the tests that count the cluster's calls or
fault every one of them.

The stack's fake serves every test run on the machine at once: its counters hold their calls
too, and a rule that throttles every operation would fail their steps. This one runs in the
test process (pods as processes, as the stack's), and ``cluster`` points the
``kubernetes_default`` connection at it for one test, its counters and faults cleared.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cloud.control import FakeControl


@pytest.fixture(scope="module")
def private_cluster(
    cloud_stack: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """The fake, started once per test module; its pods are stopped when it shuts down."""
    from cloud.fake_http import FakeServer
    from cloud.kubernetes.server import KubernetesFake
    from cloud.runner import MODE_PROCESS, BaseImage

    pods = tmp_path_factory.mktemp("kubernetes-pods")
    fake = KubernetesFake(
        mode=MODE_PROCESS, tmp_base=str(pods), data_dir=str(pods / "volumes"),
        base_image=BaseImage.from_env(cloud_stack),
    )  # fmt: skip
    server = FakeServer(fake, "127.0.0.1", 0)
    try:
        yield server
    finally:
        server.shutdown()


@pytest.fixture
def cluster(
    k8s: dict[str, Any], private_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """``k8s`` with the connection on the private fake: ``fake`` its URL, ``ctl`` its control
    (counters and faults cleared; the Jobs of earlier tests stay, each run's own labels)."""
    from cloud.kubernetes.server import stack_env

    connection = stack_env(private_cluster.url, {})["AIRFLOW_CONN_KUBERNETES_DEFAULT"]
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection)
    control = FakeControl(private_cluster.url)
    control.reset()
    return {**k8s, "fake": private_cluster.url, "ctl": control}
