"""What a trigger imports on the triggerer's event loop, in a fresh process (run as a script).

``python -m tests.integration.loop_imports BACKEND_PATH BACKEND_KWARGS HANDLE`` (both JSON) runs
a StepJobTrigger for the handle until its first event or error and prints, as JSON, every
module imported for the first time on the running loop's thread while the loop ran. A cloud
SDK's first import takes seconds: on the loop it stalls every trigger of the process.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any


class _LoopImports:
    """A meta path finder that finds nothing: it only notes first imports on a running loop."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a worker thread (asyncio.to_thread), or no loop at all
            return None
        self.names.append(name)
        return None


async def _first_event(trigger: Any) -> str:
    try:
        async for event in trigger.run():
            return str(event.payload.get("status"))
    except Exception as exc:  # a job the service does not know: the calls were made anyway
        return f"error: {type(exc).__name__}"
    return "no event"


def main(argv: list[str]) -> None:
    from airflow_stepop.triggers.step_job import StepJobTrigger

    backend_path, kwargs, handle = argv[0], json.loads(argv[1]), json.loads(argv[2])
    trigger = StepJobTrigger(
        backend_path=backend_path, backend_kwargs=kwargs, handle=handle, poll_interval=0.2
    )
    recorder = _LoopImports()
    sys.meta_path.insert(0, recorder)
    outcome = asyncio.run(asyncio.wait_for(_first_event(trigger), 120))
    print(json.dumps({"outcome": outcome, "on_loop": recorder.names}))


if __name__ == "__main__":
    main(sys.argv[1:])
