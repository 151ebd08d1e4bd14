"""Run one fake in the foreground: ``python -m cloud.serve MODULE HOST PORT``.

The stack starts each fake this way; the stack's env so far arrives as JSON in
``STEPOP_CLOUD_ENV_JSON`` and is handed to the module's ``serve(host, port, env)``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys


def main(argv: list[str]) -> int:
    """Import the fake's module and serve until SIGTERM."""
    if len(argv) != 3:
        print("usage: python -m cloud.serve MODULE HOST PORT", file=sys.stderr)
        return 2
    module, host, port = argv
    env = json.loads(os.environ.get("STEPOP_CLOUD_ENV_JSON") or "{}")
    importlib.import_module(module).serve(host, int(port), env)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
