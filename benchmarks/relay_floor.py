"""The least a stdio relay can do: copy bytes both ways between its stdio and one child.

``benchmarks/external.py`` runs an external server behind this as well as behind
``dpt-launch``: no parsing, no renaming, no lock, no timeout. What it costs against a direct
connection is the floor of any relay on the machine (the extra process and its wake-ups),
which reads the launcher's ratio. Run: ``python benchmarks/relay_floor.py COMMAND [ARGS...]``.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys

CHUNK = 1 << 16


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main() -> int:
    child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    to_child, from_child = child.stdin.fileno(), child.stdout.fileno()
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ, (0, to_child))
    selector.register(from_child, selectors.EVENT_READ, (from_child, 1))
    while True:
        for key, _ in selector.select():
            source, target = key.data
            data = os.read(source, CHUNK)
            if not data:  # the client or the child is done
                child.stdin.close()
                return child.wait()
            write_all(target, data)


if __name__ == "__main__":
    sys.exit(main())
