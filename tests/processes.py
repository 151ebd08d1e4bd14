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


def holding_files_under(directory: str) -> list[str]:
    """Live processes with a file open under ``directory`` (e.g. a log they write): what a
    command that should have stopped everything it started left running, as ``pid command``."""
    prefix = os.path.join(os.path.realpath(directory), "")
    held = []
    for entry in os.listdir("/proc"):
        found = _state_and_group(entry) if entry.isdigit() else None
        if found is None or found[0] == "Z":
            continue
        try:
            descriptors = os.listdir(f"/proc/{entry}/fd")
            opened = [os.readlink(f"/proc/{entry}/fd/{fd}") for fd in descriptors]
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # ended meanwhile, or not ours to read
            continue
        if any(path.startswith(prefix) for path in opened):
            held.append(f"{entry} {command}")
    return held
