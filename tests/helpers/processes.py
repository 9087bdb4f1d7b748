"""Processes seen through Linux ``/proc``, for tests and benchmarks (one place for both)."""

from __future__ import annotations

import os
from pathlib import Path


def child_pids(parent: int) -> list[int]:
    """*parent*'s children (empty where there is no /proc)."""
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """Whether *pid* is a running process (a zombie is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def started_at(pid: int) -> int:
    """When *pid* started, in clock ticks since boot (to order processes; 0 when it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def cmdline(pid: int) -> str:
    """*pid*'s command line, its arguments joined by spaces ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def pids_with(marker: str) -> list[int]:
    """Live processes whose command line holds *marker*."""
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit() and marker in cmdline(int(entry)) and alive(int(entry)):
            found.append(int(entry))
    return found


def descendant_pids(parent: int) -> list[int]:
    """*parent*'s children, their children, and so on."""
    found, todo = [], [parent]
    while todo:
        children = child_pids(todo.pop())
        found += children
        todo += children
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (0 where there is no /proc, or no such process)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def launcher_pid(config: Path) -> int:
    """The dpt-launch process serving *config* (a child of this process)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if parent == os.getpid() and str(config).encode() in cmdline:
            return int(entry)
    raise AssertionError(f"no dpt-launch serving {config}")


def wakeups(pid: int) -> int:
    """How many times *pid* has blocked and woken up so far (Linux: its voluntary context
    switches): a process polling in a loop wakes once per round."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError(f"no voluntary_ctxt_switches in /proc/{pid}/status")
