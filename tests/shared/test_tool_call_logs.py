"""A refused tool call is an ordinary answer: nothing but a DEBUG line in the log.

fastmcp logs every failed call as ``Error calling tool '<name>'`` through its rich
handler (a traceback box for an unexpected exception). Through ``dpt-launch`` a
refusal (bad input) leaves no line at the default level, and a real failure leaves
exactly one plain ERROR line.
"""

from __future__ import annotations

import logging
import tempfile
import textwrap

import anyio

from doc_processing_std_tools.shared.tool_call_logs import TOOL_CALL_LOGGER, quiet_tool_call_logs
from helpers.launch import launched, text_of

BOOM_SERVER = '''\
from fastmcp import FastMCP

server = FastMCP("boom")


@server.tool
def boom() -> str:
    """Fails as a bug in a tool would."""
    raise RuntimeError("kaboom")
'''

BOX_DRAWING = set(chr(c) for c in range(0x2500, 0x2580))


def config(tmp_path, log_level: str = "WARNING"):
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "boom_server.py").write_text(BOOM_SERVER)
    path = tmp_path / "tools.yaml"
    path.write_text(
        textwrap.dedent(f"""\
            log_level: {log_level}
            servers:
              memory:
                server: memory-tools
                settings: {{memory_dir: {tmp_path / "memory"}}}
              filesystem:
                settings: {{roots: [{root}]}}
              boom:
                module: boom_server:server
            """)
    )
    return path


async def calls_and_log(
    path, calls: list[tuple[str, dict]], level: str = "WARNING"
) -> tuple[list, str]:
    # fastmcp takes its level from FASTMCP_LOG_LEVEL, which the launcher only defaults: a
    # test that ran main() in this worker may have left it set, so it is given here
    env = {"FASTMCP_LOG_LEVEL": level}
    with tempfile.TemporaryFile("w+") as errlog:
        with anyio.fail_after(60):
            async with launched(path, errlog=errlog, env=env) as session:
                results = [await session.call_tool(name, args) for name, args in calls]
        errlog.seek(0)
        return results, errlog.read()


REFUSED = [
    ("read_memory", {"key": "no-such-key"}),
    ("read_text_file", {"path": "/etc/passwd"}),
    ("memory_insert", {"path": "x.md", "insert_line": "not a number", "insert_text": "y"}),
]


async def test_refused_calls_leave_no_line_and_a_failure_one_plain_error_line(tmp_path) -> None:
    results, log = await calls_and_log(config(tmp_path), [*REFUSED, ("boom", {})])
    assert all(result.is_error for result in results), [text_of(r) for r in results]
    assert "kaboom" in text_of(results[-1])
    assert "Error calling tool 'read_memory'" not in log, log
    assert "Error calling tool 'read_text_file'" not in log, log
    assert "Error calling tool 'memory_insert'" not in log, log
    assert not BOX_DRAWING & set(log), log
    assert "Traceback" not in log, log
    failures = [line for line in log.splitlines() if "boom" in line]
    assert len(failures) == 1, log
    assert " ERROR " in failures[0] and "RuntimeError: kaboom" in failures[0], log


async def test_at_debug_each_refusal_is_one_plain_line_without_its_text(tmp_path) -> None:
    results, log = await calls_and_log(config(tmp_path, "DEBUG"), REFUSED, "DEBUG")
    assert all(result.is_error for result in results)
    for name, _ in REFUSED:
        lines = [line for line in log.splitlines() if f"Error calling tool '{name}'" in line]
        assert len(lines) == 1, (name, log[-3000:])
        assert " DEBUG " in lines[0] and "refused" in lines[0], lines
    assert "no-such-key" not in "".join(
        line for line in log.splitlines() if "Error calling tool" in line
    )
    assert not BOX_DRAWING & set(
        "".join(line for line in log.splitlines() if "Error calling tool" in line)
    )


def test_a_read_error_passed_through_two_servers_is_one_plain_line() -> None:
    """A mounted server's resource error is logged by it and again by the launcher's root:
    one plain line for both, the traceback kept for DEBUG."""
    quiet_tool_call_logs()
    fastmcp_log = logging.getLogger(TOOL_CALL_LOGGER)
    ours = logging.getLogger("doc_processing_std_tools.tools")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    levels = fastmcp_log.level, ours.level
    fastmcp_log.setLevel(logging.DEBUG)
    ours.setLevel(logging.DEBUG)
    ours.addHandler(handler)
    error = LookupError("Unknown resource: demo://x")
    try:
        for uri in ("demo://x", "demo://ns/x"):
            try:
                raise error
            except LookupError:
                fastmcp_log.exception("Error reading resource %r", uri)
    finally:
        ours.removeHandler(handler)
        fastmcp_log.setLevel(levels[0])
        ours.setLevel(levels[1])
    lines = [r.getMessage() for r in records]
    assert lines == ["Error reading resource 'demo://x': LookupError: Unknown resource: demo://x"]
