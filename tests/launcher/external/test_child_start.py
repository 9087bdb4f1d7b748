"""Commands started before the launcher's imports: each claimed once by its server, and what no
server claimed stopped (``external/child_start.py``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from doc_processing_std_tools.launcher.config.schema import load_config
from doc_processing_std_tools.launcher.external import child_start
from helpers.paths import SERVERS
from helpers.waiting import until

LATE = SERVERS / "late_child.py"

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="counts processes in /proc (and the shim is Linux-only)",
)


def running_with(mark: str) -> int:
    """How many live processes have *mark* in their command line (the shims and the commands)."""
    count = 0
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                line = file.read()
            with open(f"/proc/{entry}/stat", "rb") as file:
                state = file.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        count += mark.encode() in line and state != b"Z"
    return count


async def test_each_command_is_claimed_once_and_the_rest_stopped(
    write_config, tmp_path: Path
) -> None:
    gate = tmp_path / "gate-never-made"
    entry = "  {name}:\n    command: {py}\n    args: [{late}, {gate}]\n"
    config = write_config(
        "servers:\n"
        + "".join(entry.format(name=n, py=sys.executable, late=LATE, gate=gate) for n in "ab")
    )
    await child_start.start_commands(load_config(config))
    claimed = child_start.claim("a")
    assert claimed is not None and claimed.process.returncode is None
    assert child_start.claim("a") is None  # (a later session starts its own)
    await until(lambda: running_with(str(gate)) == 4, "two shims and two commands")
    await child_start.stop_unclaimed()  # 'b': no server claimed it
    assert child_start.claim("b") is None
    await until(lambda: running_with(str(gate)) == 2, "only the claimed one left")
    assert claimed.process.returncode is None
    claimed.process.terminate()
    with anyio.fail_after(10):
        await claimed.process.wait()
    claimed.relay.close()
    await until(lambda: running_with(str(gate)) == 0, "the claimed one ended by its shim")


async def test_serving_http_a_per_client_command_also_starts_its_first_clients_child(
    write_config, tmp_path: Path
) -> None:
    """With *first_clients* a ``per_client`` command is started twice (the second for its first
    client, claimed once), a ``shared`` one once; without it, each once (stdio, ``--check``)."""
    gate = tmp_path / "gate-never-made"
    entry = "  {name}:\n    command: {py}\n    args: [{late}, {gate}]\n    sessions: {mode}\n"
    config = write_config(
        "servers:\n"
        + "".join(
            entry.format(name=n, py=sys.executable, late=LATE, gate=gate, mode=mode)
            for n, mode in (("a", "per_client"), ("b", "shared"))
        )
    )
    await child_start.start_commands(load_config(config))
    assert child_start.claim_first("a") is None  # (over stdio: the one client's is ours)
    await child_start.stop_unclaimed()
    await until(lambda: running_with(str(gate)) == 0, "all stopped")

    await child_start.start_commands(load_config(config), first_clients=True)
    assert child_start.claim_first("b") is None  # (shared: every client's is the launcher's)
    first = child_start.claim_first("a")
    assert first is not None and first.returncode is None
    assert child_start.claim_first("a") is None
    await until(lambda: running_with(str(gate)) == 6, "three shims and three commands")
    await child_start.stop_unclaimed()  # a's and b's own sessions: no server claimed them
    await until(lambda: running_with(str(gate)) == 2, "only the first client's left")
    await child_start.stop_process(first)
    assert first.returncode is not None
    await until(lambda: running_with(str(gate)) == 0, "the first client's stopped, shim too")
