"""Sequential calls/s of several stdio servers, measured side by side on one machine.

Every server is started once and kept open; the measured calls run in short blocks, one
block per server in turn (the order reversed each round). A busy minute on a shared
machine then slows every server alike, where rounds of fresh processes compared by their
medians read the machine's drift between rounds as a difference between the servers.
``popoto_bench.py`` measures its two servers the same way.

The workload is memory-tools' ``write_memory`` + ``read_memory`` on the same 20 keys.
On Linux each server's CPU per call is read from ``/proc`` too: the process the client
started (a launcher: its own CPU, children excluded) and everything under it (the
server behind a launcher, and the shim it runs under).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the shared helpers
from helpers.processes import child_pids, cpu_seconds, descendant_pids

WARM_CALLS = 20  # per server, before anything is measured


@dataclass
class Measured:
    """One server's figures over all its blocks."""

    block_rates: list[float] = field(default_factory=list)  # calls/s of each block
    cpu_ms: float = 0.0  # CPU ms per call of the process the client started
    behind_cpu_ms: float = 0.0  # CPU ms per call of that process's children

    @property
    def rate(self) -> float:
        """Median calls/s of the blocks."""
        return statistics.median(self.block_rates)


@asynccontextmanager
async def open_sessions(
    servers: Mapping[str, tuple[list[str], dict[str, str]]],
) -> AsyncIterator[dict[str, tuple[Any, list[int]]]]:
    """Every one of *servers* (name -> command, env) started and initialized, all open at once:
    name -> (its ``ClientSession``, the pids the client started for it)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    opened = {}
    with open(os.devnull, "w") as errlog:
        async with AsyncExitStack() as stack:
            for name, (command, env) in servers.items():
                before = set(child_pids(os.getpid()))
                params = StdioServerParameters(command=command[0], args=command[1:], env=env)
                read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                opened[name] = (session, sorted(set(child_pids(os.getpid())) - before))
            yield opened


async def side_by_side(
    servers: Mapping[str, tuple[list[str], dict[str, str]]], blocks: int, calls: int
) -> dict[str, Measured]:
    """*blocks* rounds of *calls* sequential calls on each of *servers* (name -> command, env)."""
    async with open_sessions(servers) as opened:
        for session, _ in opened.values():
            for i in range(WARM_CALLS):
                await session.call_tool("write_memory", {"key": f"k{i}", "value": "warm"})
        sessions = {name: session for name, (session, _) in opened.items()}
        started = {name: pids for name, (_, pids) in opened.items()}
        return await _blocks(sessions, started, blocks, calls)


async def _blocks(
    sessions: Mapping[str, Any], started: Mapping[str, list[int]], blocks: int, calls: int
) -> dict[str, Measured]:
    # (a launcher's external server runs under its shim: launcher/external/child.py)
    behind = {
        name: [c for pid in pids for c in descendant_pids(pid)] for name, pids in started.items()
    }
    cpu = {name: sum(map(cpu_seconds, pids)) for name, pids in started.items()}
    behind_cpu = {name: sum(map(cpu_seconds, pids)) for name, pids in behind.items()}
    measured = {name: Measured() for name in sessions}
    order = list(sessions)
    for _ in range(blocks):
        for name in order:
            session = sessions[name]
            start = time.perf_counter()
            for i in range(calls // 2):
                key = f"k{i % 20}"
                result = await session.call_tool("write_memory", {"key": key, "value": f"v{i}"})
                assert not result.is_error, result
                result = await session.call_tool("read_memory", {"key": key})
                assert not result.is_error, result
            measured[name].block_rates.append(calls / (time.perf_counter() - start))
        order.reverse()
    total = blocks * calls
    for name, figures in measured.items():
        figures.cpu_ms = (sum(map(cpu_seconds, started[name])) - cpu[name]) / total * 1000
        figures.behind_cpu_ms = (
            (sum(map(cpu_seconds, behind[name])) - behind_cpu[name]) / total * 1000
        )
    return measured
