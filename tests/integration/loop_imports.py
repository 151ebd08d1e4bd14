"""What a trigger imports and reads on the triggerer's event loop, in a fresh process.

``python -m tests.integration.loop_imports BACKEND_PATH BACKEND_KWARGS HANDLE`` (both JSON) runs
a StepJobTrigger for the handle until its first event or error and prints, as JSON, every
module imported for the first time on the running loop's thread while the loop ran, and every
installed package's data file (not code) opened there. A cloud SDK's first import takes
seconds, and botocore's service model a quarter of one: on the loop either stalls every trigger
of the process.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from typing import Any

CODE_SUFFIXES = (".py", ".pyc", ".so", ".pth")


def _on_the_loop() -> bool:
    """On the trigger's loop: the main thread's, while it runs (not a worker thread's, not a
    loop that one runs on its own)."""
    return threading.current_thread() is threading.main_thread() and _loop_running()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _LoopImports:
    """A meta path finder that finds nothing: it only notes first imports on a running loop."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if _on_the_loop():
            self.names.append(name)
        return None


class _LoopReads:
    """An audit hook's notes: installed packages' data files opened on a running loop."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, event: str, args: tuple) -> None:
        if event != "open" or not isinstance(args[0], str):
            return
        path = args[0]
        if f"{os.sep}site-packages{os.sep}" not in path or path.endswith(CODE_SUFFIXES):
            return
        if _on_the_loop():
            self.paths.append(path)


async def _first_event(trigger: Any) -> str:
    try:
        async for event in trigger.run():  # a job the service does not know: "unwatched"
            return f"{event.payload.get('status')}: {event.payload.get('reason')}"
    except Exception as exc:
        return f"error: {type(exc).__name__}"
    return "no event"


def main(argv: list[str]) -> None:
    from airflow_stepop.triggers.step_job import StepJobTrigger

    backend_path, kwargs, handle = argv[0], json.loads(argv[1]), json.loads(argv[2])
    trigger = StepJobTrigger(
        backend_path=backend_path, backend_kwargs=kwargs, handle=handle, poll_interval=0.2
    )
    imports, reads = _LoopImports(), _LoopReads()
    sys.meta_path.insert(0, imports)
    sys.addaudithook(reads)
    outcome = asyncio.run(asyncio.wait_for(_first_event(trigger), 120))
    print(json.dumps({"outcome": outcome, "on_loop": imports.names, "read_on_loop": reads.paths}))


if __name__ == "__main__":
    main(sys.argv[1:])
