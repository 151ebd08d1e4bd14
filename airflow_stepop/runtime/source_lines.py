"""Source lines for the tracebacks of a callable that travelled pickled (standard library only).

The DAG file a pickled step was defined in is not in the job's container, so Python could name
the file and line of a frame but not show the line. The bundle carries the lines of the code it
pickled (``sources.json``: file name -> line number -> text); they go into ``linecache``, which
``traceback`` reads. An entry with no modification time is never checked against the disk, so
these lines win over a file of the same name in the job.
"""

from __future__ import annotations

import json
import linecache
from pathlib import Path


def register(sources_file: Path) -> None:
    """Give ``linecache`` the lines in ``sources_file`` (nothing when the bundle has none)."""
    try:
        sources = json.loads(sources_file.read_text())
    except FileNotFoundError:  # a bundle built before sources.json was: lines stay unshown
        return
    for filename, numbered in sources.items():
        lines = ["\n"] * max(int(n) for n in numbered)
        for number, text in numbered.items():
            lines[int(number) - 1] = text
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
