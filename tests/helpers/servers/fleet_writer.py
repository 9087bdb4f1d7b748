"""A writer for fleet-lock tests, run as a launcher's ``command:`` server with ``lock: always``.

``python fleet_writer.py REDIS_PORT`` serves stdio. ``write(label, hold)`` records when it
starts and ends in the Redis list ``fleet-writer:log`` (the one store the test's "machines"
share), holding for *hold* seconds between: two calls that overlap show up as two ``enter``
entries in a row. Each entry is ``enter|exit LABEL LAUNCHER_PID WRITER_PID UNIX_TIME``. ``pid`` names the process (to kill a holder's launcher).
"""

from __future__ import annotations

import os
import sys
import time

import redis
from fastmcp import FastMCP

LOG = "fleet-writer:log"
server = FastMCP("fleet-writer")
store = redis.Redis(port=int(sys.argv[1]))


@server.tool
def write(label: str, hold: float = 0.0) -> str:
    """Record the start, hold, record the end: the lock must keep every other writer out."""
    store.rpush(LOG, f"enter {label} {os.getppid()} {os.getpid()} {time.time()}")
    time.sleep(hold)
    store.rpush(LOG, f"exit {label} {os.getppid()} {os.getpid()} {time.time()}")
    return f"wrote {label}"


if __name__ == "__main__":
    server.run(show_banner=False)
