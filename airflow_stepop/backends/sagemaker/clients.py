"""The SageMaker backend's clients: the amazon provider's hooks, and their async clients.

A backend keeps one hook per kind of client (``sagemaker``, ``logs``, ...) and, on the
triggerer, one open aiobotocore client per kind and event loop, shared by its poll group's
triggers. Opening the first async client of a kind in a process reads botocore's data files
(the service model, its endpoint rules, the partitions: about 0.25 s of CPU for SageMaker), on
the event loop that opens it, stalling every other trigger of the process meanwhile.
``prepare`` (in a thread) therefore opens and closes one of each kind once per process, on a
loop of its own: botocore keeps what it read for the provider's later sessions.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

ASYNC_KINDS = ("sagemaker", "logs")  # what the backend's trigger calls use

_warm_kinds: set[str] = set()  # kinds whose data files this process has read
_warm_lock = threading.Lock()


class Clients:
    """One backend's hooks, and its open async clients (closed by ``aclose``)."""

    def __init__(
        self,
        aws_conn_id: str | None,
        region_name: str | None,
        kinds: tuple[str, ...] = ASYNC_KINDS,
    ) -> None:
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.kinds = kinds  # what this user's async calls use
        self._hooks: dict[str, Any] = {}
        self._opened: dict[tuple[str, int], asyncio.Future] = {}  # (kind, loop) -> opening

    def hook(self, kind: str) -> Any:
        """The provider's hook for one kind of client: SageMaker's, CloudWatch Logs', any."""
        if kind not in self._hooks:
            if kind == "sagemaker":
                from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook as cls
            elif kind == "logs":
                from airflow.providers.amazon.aws.hooks.logs import AwsLogsHook as cls
            else:
                from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

                def cls(**kw: Any) -> Any:
                    return AwsBaseHook(client_type=kind, **kw)

            self._hooks[kind] = cls(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        return self._hooks[kind]

    def prepare(self) -> None:
        """In a thread, before the first async call: the hooks (boto3 and botocore on a first
        import), and, once per process, botocore's data files for each async kind."""
        for kind in self.kinds:
            hook = self.hook(kind)
            with _warm_lock:
                if kind not in _warm_kinds:
                    asyncio.run(_open_and_close(hook))
                    _warm_kinds.add(kind)

    async def get(self, kind: str) -> Any:
        """The open async client of ``kind`` on the running loop. Opening one costs tens of ms
        of CPU even when warm: the loop's callers share it, and concurrent first calls share
        one opening."""
        key = (kind, id(asyncio.get_running_loop()))
        if key not in self._opened:
            self._opened[key] = asyncio.ensure_future(_open(self.hook(kind)))
        return (await self._opened[key])[1]

    async def aclose(self) -> None:
        opened, self._opened = self._opened, {}
        for opening in opened.values():
            creator, _ = await opening
            await creator.__aexit__(None, None, None)


async def _open(hook: Any) -> tuple[Any, Any]:
    """The client's context manager (the connection is read in a thread) and the client."""
    creator = await hook.get_async_conn()
    return creator, await creator.__aenter__()


async def _open_and_close(hook: Any) -> None:
    creator, _ = await _open(hook)
    await creator.__aexit__(None, None, None)
