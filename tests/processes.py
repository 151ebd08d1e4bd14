"""Process helpers shared by the tests."""

from __future__ import annotations

import os


def _state_and_group(pid: int | str) -> tuple[str, int] | None:
    """A process's state letter and process group, from /proc (None: it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state, _, group = handle.read().rsplit(")", 1)[1].split()[:3]
    except (OSError, ValueError):
        return None
    return state, int(group)


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (ended, not yet reaped) counts as gone."""
    found = _state_and_group(pid)
    return found is not None and found[0] != "Z"


def group_members(group: int) -> list[int]:
    """The live (not zombie) processes of a process group."""
    members = []
    for entry in os.listdir("/proc"):
        found = _state_and_group(entry) if entry.isdigit() else None
        if found is not None and found[1] == group and found[0] != "Z":
            members.append(int(entry))
    return members
