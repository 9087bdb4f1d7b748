"""The spare child of a ``per_client`` command server: taken while it runs, dropped when it
died, refilled once, and stopped and reaped on close (``external/spare.py``)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from doc_processing_std_tools.launcher.config.schema import load_config
from doc_processing_std_tools.launcher.external.child_start import stop_process
from doc_processing_std_tools.launcher.external.spare import Spare
from helpers.paths import SERVERS
from helpers.processes import alive
from helpers.waiting import until

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="looks at processes in /proc"
)


async def test_a_spare_is_taken_while_running_dropped_when_dead_and_reaped_on_close(
    write_config, tmp_path: Path
) -> None:
    late, gate = SERVERS / "late_child.py", tmp_path / "gate-never-made"
    loaded = load_config(
        write_config(f"servers:\n  a:\n    command: {sys.executable}\n    args: [{late}, {gate}]\n")
    )
    spare = Spare("a", loaded.config.servers["a"], loaded.base_dir, sys.stderr)
    async with anyio.create_task_group() as tasks:
        spare.refill(tasks)
        spare.refill(tasks)  # (one is starting: no second)
        await until(lambda: spare.process is not None, "the spare started")
        assert spare.spawned == 1
        taken = spare.take(tasks)
        assert taken is not None and taken.returncode is None and spare.process is None
        await stop_process(taken)  # (a session would stop it: here nothing else does)

        spare.refill(tasks)
        await until(lambda: spare.process is not None, "a new spare started")
        died = spare.process
        os.killpg(died.pid, signal.SIGKILL)
        await until(lambda: died.returncode is not None, "the spare died")
        assert spare.take(tasks) is None  # (the session starts its own)

        spare.refill(tasks)
        await until(lambda: spare.process is not None, "a third spare started")
        last = spare.process.pid
        await spare.close()
        assert not alive(last) and spare.process is None
        spare.refill(tasks)  # (closed: none started)
    assert spare.process is None and spare.spawned == 3
