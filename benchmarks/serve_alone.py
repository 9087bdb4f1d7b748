"""One server package served alone, the way ``dpt-launch`` serves a composition: the reference
that launcher-vs-alone benchmarks compare a launcher against.

``python -m doc_processing_std_tools.memory`` serves the server on asyncio's event loop with
fastmcp's stdio transport; ``dpt-launch`` serves on uvloop (``DPTTOOLS_EVENT_LOOP``) with its
own stdio transport (``launcher/cli/serve.py``'s ``run_stdio``: stdin read by a thread, the
relay fast path). Compared with each other they measure the event loop and the transport, not
the mount. This script serves the package's standalone server (settings from the environment,
as ``python -m`` builds it) through the launcher's own start-up and serving code: the same
logging set-up, the same garbage-collector handling (collections off while building, what was
built frozen), the same event loop (``event_loop_options()``, so ``DPTTOOLS_EVENT_LOOP`` applies
to both) and the same ``run_stdio``. What is left between the two is the mount: the
composition's call rules (process lock, deadline, telemetry, failure mapping) and name
exposure around each call.

Run: ``python benchmarks/serve_alone.py memory`` (``filesystem ROOT...``, ``popoto_memory``).
"""

from __future__ import annotations

import gc
import importlib
import sys

import anyio

from doc_processing_std_tools.launcher.cli.main import _setup_logging, event_loop_options
from doc_processing_std_tools.launcher.cli.serve import run_stdio


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: serve_alone.py PACKAGE [ARGS...] (memory, filesystem, ...)", file=sys.stderr)
        return 2
    package = importlib.import_module(f"doc_processing_std_tools.{argv[0]}")
    _setup_logging("WARNING")
    gc.disable()
    try:
        server = package.standalone_server(argv[1:])
        gc.freeze()
    finally:
        gc.enable()
    anyio.run(run_stdio, server, backend_options=event_loop_options())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
