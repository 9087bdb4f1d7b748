"""One call policy on every path (issue 33 §1): the same failures through every way a tool call
can go, each ending with the same outcome label, exactly one count in ``dpt_tool_calls_total``,
exactly one span, and the same answer text once the tool's and server's names are taken out.

Real parts: two launchers (``tests/policy_launcher.py``: the real CLI, its telemetry read
exactly), one over stdio and one over streamable HTTP; the external servers are child processes
(``tests/policy_server.py``) or, for ``url:``, processes serving a port this module holds; the
in-process one is ``tests/policy_plain_server.py``. Each cell waits on what it can observe (a
marker file a tool writes, a reply, a metric, a server's state), never on time passing.

The ways a call goes (``docs/architecture.md``, "One tool call"):

- ``inprocess``: an in-process tool over HTTP: the SDK server, fastmcp, ``PolicedTool``.
- ``plain``: an in-process tool's plain call on the stdio fast path (popoto-memory's way).
- ``stdio-inline``: a ``command:`` server's call on the stdio fast path, from callbacks.
- ``stdio-task``: the same in a task (a progress token sends it there).
- ``stdio-sdk``: over stdio, the SDK path's relay (``ToolRelay._relay``), taken while the
  server is down.
- ``http-sdk``: a ``command:`` server's call relayed over HTTP (``ToolRelay._relay``).
- ``url``: a ``url:`` server's call relayed over HTTP.
- ``search``: ``call_tool`` of a profile in search mode (``ProfileGate``), over HTTP.
- ``proxy``: a call the relay steps aside for (a param beyond name, arguments and _meta):
  fastmcp's proxy of the ``command:`` server.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from launch_helpers import SERVING_LINE, wait_until_serving
from rpc_helpers import initialize_params, message, reply_message, request, rpc_headers
from stdio_wire import INITIALIZE, INITIALIZED

from doc_processing_std_tools.launcher.calls.policy import CallPolicy, LockMode, ToolRules

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("prometheus_client")

TESTS = Path(__file__).resolve().parent
LAUNCHER = TESTS / "policy_launcher.py"
EXTERNAL = TESTS / "policy_server.py"
PLAIN = "policy_plain_server:create"
SHORT = 0.5  # seconds: the timeout of the servers whose calls run out of time
WAIT = 30.0  # seconds any awaited state has to come
OBSERVER_LINE = re.compile(r"policy observer on port (\d+)")
SAMPLE = re.compile(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$")
CANCELLED_BY_TRANSPORT = -32800  # what the SDK's HTTP transport closes a cancelled POST with

FAILURES = ("lock_timeout", "timeout", "refusal", "crash", "cancelled")
OUTCOMES = {
    "lock_timeout": "lock_timeout",
    "timeout": "timeout",
    "refusal": "unavailable",
    "crash": "unavailable",
    "cancelled": "cancelled",
}
_NAMED = CallPolicy(ToolRules(server="<server>", tool="<tool>", lock=LockMode.HELD, timeout=SHORT))
# The answer each failure gets, on every path: the policy's own text; a server that went down
# says so in its supervisor's words (this server writes nothing to stderr, so both kinds say
# the same).
ANSWERS = {
    "lock_timeout": _NAMED.timeout_text(waited_for_lock=True),
    "timeout": _NAMED.timeout_text(),
    "refusal": "server '<server>' is restarting (attempt 1): the session closed",
    "crash": "server '<server>' is restarting (attempt 1): the connection closed",
}


@dataclass(frozen=True)
class Way:
    """One way a call goes: the launcher serving it, its servers (short and long timeout), and
    what the request carries to go that way."""

    name: str
    transport: str  # "stdio" or "http"
    servers: tuple[str, str]  # (timeout SHORT, timeout 60 s): mount names, also namespaces
    endpoint: str = "/mcp"
    progress: bool = False  # a progress token: the stdio fast path serves it in a task
    extra: dict[str, Any] = field(default_factory=dict)  # params beyond name and arguments
    via_call_tool: bool = False


WAYS = {
    way.name: way
    for way in (
        Way("inprocess", "http", ("inpshort", "inplong")),
        Way("plain", "stdio", ("plainshort", "plainlong")),
        Way("stdio-inline", "stdio", ("cmdshort", "cmdlong")),
        Way("stdio-task", "stdio", ("cmdshort", "cmdlong"), progress=True),
        Way("stdio-sdk", "stdio", ("cmdshort", "cmdlong")),
        Way("http-sdk", "http", ("cmdshort", "cmdlong")),
        Way("url", "http", ("urlshort", "urllong")),
        Way("search", "http", ("cmdshort", "cmdlong"), endpoint="/mcp/finder", via_call_tool=True),
        Way("proxy", "http", ("cmdshort", "cmdlong"), extra={"policyTest": "aside"}),
    )
}

IN_PROCESS = "an in-process server has no process of its own to lose: nothing refuses its calls"
NO_CHILD = "an in-process tool has no child process to crash"
SDK_ONLY_WHILE_DOWN = (
    "over stdio the SDK path relays a call only while its server is down (the fast path takes "
    "every plain call to a live one): its other failures are the http-sdk cells' (the same "
    "ToolRelay._relay)"
)
NOT_APPLICABLE = {
    ("inprocess", "refusal"): IN_PROCESS,
    ("inprocess", "crash"): NO_CHILD,
    ("plain", "refusal"): IN_PROCESS,
    ("plain", "crash"): NO_CHILD,
    ("stdio-inline", "lock_timeout"): (
        "a call that must wait for the lock is never served inline: InlineCalls leaves it to a "
        "task (the stdio-task cell)"
    ),
    ("stdio-inline", "refusal"): (
        "the fast path never takes a call to a server that is down: the SDK path answers it "
        "(the stdio-sdk cell)"
    ),
    ("stdio-task", "refusal"): (
        "the fast path never takes a call to a server that is down: the SDK path answers it "
        "(the stdio-sdk cell)"
    ),
    **{("stdio-sdk", f): SDK_ONLY_WHILE_DOWN for f in FAILURES if f != "refusal"},
}


def cells() -> Iterator[Any]:
    for way in WAYS:
        for failure in FAILURES:
            why = NOT_APPLICABLE.get((way, failure))
            marks = [pytest.mark.skip(reason=f"not applicable: {why}")] if why else []
            yield pytest.param(way, failure, id=f"{way}-{failure}", marks=marks)


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT) -> Any:
    """*check*'s first true value, asked until *timeout* passes."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.02)
    return found


# -- what a launcher recorded ------------------------------------------------------------------


@dataclass
class Observed:
    calls: dict[tuple[str, str, str], float]  # (server, tool, outcome) -> dpt_tool_calls_total
    states: dict[tuple[str, str], float]  # (server, state) -> dpt_external_server_state
    spans: list[dict[str, str]]  # every finished span, in the order they ended

    def count(self, server: str, tool: str, outcome: str | None = None) -> float:
        return sum(
            value
            for (s, t, o), value in self.calls.items()
            if (s, t) == (server, tool) and outcome in (None, o)
        )

    def spans_of(self, server: str, tool: str, since: int = 0) -> list[dict[str, str]]:
        return [
            span
            for span in self.spans[since:]
            if (span.get("dpt.server"), span.get("dpt.tool")) == (server, tool)
        ]


def parse_metrics(text: str) -> tuple[dict[Any, float], dict[Any, float]]:
    calls, states = {}, {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if match.group(1) == "dpt_tool_calls_total":
            calls[(labels["server"], labels["tool"], labels["outcome"])] = float(match.group(3))
        elif match.group(1) == "dpt_external_server_state":
            states[(labels["server"], labels["state"])] = float(match.group(3))
    return calls, states


class Launcher:
    """A ``policy_launcher.py`` process: its stderr, its observer, the calls its cells expect."""

    def __init__(self, proc: subprocess.Popen[bytes], errlog: Path) -> None:
        self.proc, self.errlog = proc, errlog
        found = wait_for("the observer's port", lambda: OBSERVER_LINE.search(self.stderr()))
        self.observer = int(found.group(1))
        # (server, tool, outcome) of every call a cell checked: nothing else may be recorded
        # for those tools by the end (a second record coming late would be counted there)
        self.expected: Counter[tuple[str, str, str]] = Counter()

    def stderr(self) -> str:
        return self.errlog.read_text(errors="replace")

    def metrics_text(self) -> str:
        return request(self.observer, "GET", "/metrics").body.decode()

    def observe(self) -> Observed:
        calls, states = parse_metrics(self.metrics_text())
        spans = json.loads(request(self.observer, "GET", "/spans").body)
        return Observed(calls, states, spans)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def check_nothing_more(self, tools: tuple[str, ...]) -> None:
        """Every record of the cells' tools is one a cell checked: no late second record."""
        seen = self.observe()
        found = Counter(
            {key: int(v) for key, v in seen.calls.items() if key[1].endswith(tools) and v}
        )
        spans = Counter(
            (s["dpt.server"], s["dpt.tool"], s["dpt.outcome"])
            for s in seen.spans
            if s["dpt.tool"].endswith(tools)
        )
        assert found == self.expected, (found, self.expected)
        assert spans == self.expected, (spans, self.expected)


def spawn(config: Path, *args: str, **popen: Any) -> subprocess.Popen[bytes]:
    pythonpath = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, str(LAUNCHER), "--config", str(config), *args],
        cwd=config.parent,
        env={**os.environ, "PYTHONPATH": pythonpath},
        **popen,
    )


# -- the stdio launcher -----------------------------------------------------------------------


class StdioLauncher(Launcher):
    """A launcher spoken to in raw lines over its stdin and stdout; replies kept by id."""

    def __init__(self, config: Path) -> None:
        errlog = config.parent / "stderr.log"
        with errlog.open("wb") as err:
            proc = spawn(config, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        super().__init__(proc, errlog)
        self.ids = itertools.count(1)
        self.replies: dict[Any, dict[str, Any]] = {}
        self._pending = b""
        self.send(json.loads(INITIALIZE))
        assert "result" in self.reply(0)
        self.send(json.loads(INITIALIZED))

    def send(self, sent: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(sent).encode() + b"\n")
        self.proc.stdin.flush()

    def _read(self, until: float) -> bool:
        """Read what stdout has within *until*; False when nothing came."""
        assert self.proc.stdout is not None
        left = until - time.monotonic()
        if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
            return False
        chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
        assert chunk, f"the launcher closed stdout: {self.stderr()[-2000:]}"
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        for line in lines:
            got = json.loads(line)
            if "id" in got and "method" not in got:
                self.replies[got["id"]] = got
        return True

    def reply(self, request_id: Any, timeout: float = WAIT) -> dict[str, Any]:
        until = time.monotonic() + timeout
        while request_id not in self.replies:
            assert self._read(until) or time.monotonic() < until, f"no reply to {request_id}"
        return self.replies[request_id]

    def call(self, way: Way, tool: str, arguments: dict[str, Any]) -> int:
        request_id = next(self.ids)
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if way.progress:
            params["_meta"] = {"progressToken": f"progress-{request_id}"}
        self.send(message("tools/call", params, id=request_id))
        return request_id

    def cancel(self, request_id: int) -> None:
        self.send(message("notifications/cancelled", {"requestId": request_id}))

    def unanswered(self, request_id: int) -> dict[str, Any] | None:
        """Whatever *request_id* got once a later request is answered (None: nothing)."""
        ping = next(self.ids)
        self.send(message("ping", id=ping))
        self.reply(ping)
        return self.replies.get(request_id)

    def wait_down(self, server: str, before: int) -> None:
        """Until the launcher says *server*'s session ended (its *before*+1-th such line)."""
        line = f"servers.{server}: session ended; restarting"
        wait_for(f"{server} restarting", lambda: self.stderr().count(line) > before)

    def ended_sessions(self, server: str) -> int:
        return self.stderr().count(f"servers.{server}: session ended; restarting")

    def wait_up(self, way: Way, server: str) -> None:
        def up() -> bool:
            answer = self.reply(self.call(way, f"{server}_ready", {}))
            return answer["result"]["isError"] is False

        wait_for(f"{server} up", up)


# -- the HTTP launcher -------------------------------------------------------------------------


class UrlServer:
    """``policy_server.py`` serving streamable HTTP on a port held here: while no process serves
    it, the launcher's reconnects wait in its backlog; a new process takes over the same port."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        fd = self.listener.fileno()
        self.proc = subprocess.Popen(
            [sys.executable, "-W", "ignore", str(EXTERNAL), "--listen-fd", str(fd)],
            pass_fds=(fd,),
            stderr=subprocess.DEVNULL,
        )

    def again(self) -> None:
        """Serve again after the process died (its crash tool killed it)."""
        assert self.proc is not None
        self.proc.wait(timeout=WAIT)
        self.start()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.listener.close()


class HttpLauncher(Launcher):
    def __init__(self, config: Path, url_servers: dict[str, UrlServer]) -> None:
        errlog = config.parent / "stderr.log"
        with errlog.open("wb") as err:
            proc = spawn(
                config,
                "--transport",
                "http",
                "--port",
                "0",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        super().__init__(proc, errlog)
        self.url_servers = url_servers
        found = wait_for("serving", lambda: SERVING_LINE.search(self.stderr()))
        self.port = int(found.group(2))
        wait_until_serving(self.port)
        self.pool = ThreadPoolExecutor(4)
        self.sessions: dict[str, str] = {}
        self.ids = itertools.count(1)

    def post(self, endpoint: str, sent: dict[str, Any], session: str | None) -> Any:
        body = json.dumps(sent).encode()
        headers = rpc_headers(session)
        return request(self.port, "POST", endpoint, headers=headers, body=body, timeout=WAIT * 2)

    def session(self, endpoint: str) -> str:
        if endpoint not in self.sessions:
            reply = self.post(endpoint, message("initialize", initialize_params(), id=0), None)
            assert reply.status == 200, reply
            session = reply.headers["mcp-session-id"]
            done = self.post(endpoint, message("notifications/initialized"), session)
            assert done.status == 202, done
            self.sessions[endpoint] = session
        return self.sessions[endpoint]

    def call(self, way: Way, tool: str, arguments: dict[str, Any]) -> Future[Any]:
        request_id = next(self.ids)
        params: dict[str, Any] = {"name": tool, "arguments": arguments, **way.extra}
        if way.via_call_tool:
            params = {"name": "call_tool", "arguments": {"name": tool, "arguments": arguments}}
        sent = message("tools/call", params, id=request_id)
        session = self.session(way.endpoint)
        posted = self.pool.submit(self.post, way.endpoint, sent, session)
        posted.request = (way.endpoint, request_id)  # type: ignore[attr-defined]
        return posted

    def reply(self, posted: Future[Any], timeout: float = WAIT) -> dict[str, Any]:
        answer = posted.result(timeout)
        assert answer.status == 200, answer
        _endpoint, request_id = posted.request  # type: ignore[attr-defined]
        return reply_message(answer.headers["content-type"], answer.body, request_id)

    def cancel(self, posted: Future[Any]) -> None:
        endpoint, request_id = posted.request  # type: ignore[attr-defined]
        sent = message("notifications/cancelled", {"requestId": request_id})
        assert self.post(endpoint, sent, self.session(endpoint)).status == 202

    def unanswered(self, posted: Future[Any]) -> dict[str, Any] | None:
        """What a cancelled call's POST was closed with: the transport's error, never a result."""
        got = self.reply(posted)
        assert got.get("error", {}).get("code") == CANCELLED_BY_TRANSPORT, got
        return got if "result" in got else None

    def metrics_text(self) -> str:  # (the launcher's own /metrics, the same registry)
        reply = request(self.port, "GET", "/metrics")
        assert reply.status == 200, reply
        return reply.body.decode()

    def ended_sessions(self, server: str) -> int:
        return 0

    def wait_down(self, server: str, before: int) -> None:
        wait_for(
            f"{server} restarting",
            lambda: self.observe().states.get((server, "restarting")) == 1,
        )

    def wait_up(self, way: Way, server: str) -> None:
        wait_for(f"{server} up", lambda: self.observe().states.get((server, "up")) == 1)

    def stop(self) -> None:
        super().stop()
        self.pool.shutdown(wait=False, cancel_futures=True)


# -- fixtures ----------------------------------------------------------------------------------

CHECKED_TOOLS = ("_slow", "_change", "_crash")  # the tools whose every call a cell checks


def external(name: str, timeout: float, down_file: Path | None = None) -> str:
    down = f", --down-file, '{down_file}'" if down_file else ""
    return (
        f"  {name}:\n    command: {sys.executable}\n"
        f"    args: [-W, ignore, '{EXTERNAL}'{down}]\n"
        f"    namespace: {name}\n    timeout: {timeout}\n"
    )


def in_process(name: str, timeout: float) -> str:
    return f"  {name}: {{module: '{PLAIN}', namespace: {name}, timeout: {timeout}}}\n"


@pytest.fixture(scope="module")
def stdio_launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StdioLauncher]:
    folder = tmp_path_factory.mktemp("stdio")
    config = folder / "tools.yaml"
    config.write_text(
        "servers:\n"
        + in_process("holder", 60)
        + in_process("plainshort", SHORT)
        + in_process("plainlong", 60)
        + external("cmdshort", SHORT)
        + external("cmdlong", 60, folder / "cmdlong.down")
    )
    launcher = StdioLauncher(config)
    try:
        for server in ("cmdshort", "cmdlong"):
            launcher.wait_up(WAYS["stdio-inline"], server)
        yield launcher
        launcher.check_nothing_more(CHECKED_TOOLS)
    finally:
        launcher.stop()


@pytest.fixture(scope="module")
def http_launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpLauncher]:
    folder = tmp_path_factory.mktemp("http")
    config = folder / "tools.yaml"
    url_servers = {"urlshort": UrlServer(), "urllong": UrlServer()}
    urls = "".join(
        f"  {name}: {{url: '{server.url}', namespace: {name}, timeout: {timeout}}}\n"
        for (name, server), timeout in zip(url_servers.items(), (SHORT, 60), strict=True)
    )
    config.write_text(
        "profiles:\n  finder: {search: always}\n"
        "servers:\n"
        + in_process("holder", 60)
        + in_process("inpshort", SHORT)
        + in_process("inplong", 60)
        + external("cmdshort", SHORT)
        + external("cmdlong", 60, folder / "cmdlong.down")
        + urls
    )
    launcher = None
    try:
        launcher = HttpLauncher(config, url_servers)
        for server in ("cmdshort", "cmdlong", "urlshort", "urllong"):
            launcher.wait_up(WAYS["http-sdk"], server)
        yield launcher
        launcher.check_nothing_more(CHECKED_TOOLS)
    finally:
        if launcher is not None:
            launcher.stop()
        for server in url_servers.values():
            server.close()


# -- the cells ---------------------------------------------------------------------------------


def named(text: str, server: str, tool: str) -> str:
    """*text* with the tool's and the server's names taken out."""
    return text.replace(tool, "<tool>").replace(server, "<server>")


def text_of(answer: dict[str, Any]) -> str:
    result = answer["result"]
    assert result["isError"] is True, answer
    return "".join(block.get("text", "") for block in result["content"])


def check_recorded(
    launcher: Launcher, before: Observed, server: str, tool: str, outcome: str
) -> None:
    """The call of *tool* was recorded exactly once, as *outcome*: one count, one span."""

    def recorded() -> Observed | None:
        now = launcher.observe()
        done = now.count(server, tool) > before.count(server, tool)
        return now if done and now.spans_of(server, tool, len(before.spans)) else None

    after = wait_for(f"a record of {tool}", recorded)
    assert after.count(server, tool, outcome) - before.count(server, tool, outcome) == 1
    assert after.count(server, tool) - before.count(server, tool) == 1
    spans = after.spans_of(server, tool, len(before.spans))
    assert [span["dpt.outcome"] for span in spans] == [outcome], spans
    assert spans[0]["name"] == f"tools/call {tool}"
    launcher.expected[(server, tool, outcome)] += 1


@pytest.mark.parametrize(("way_name", "failure"), list(cells()))
def test_every_path_ends_a_failed_call_the_same_way(
    way_name: str, failure: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    way = WAYS[way_name]
    launcher: Any = request.getfixturevalue(f"{way.transport}_launcher")
    short, long = way.servers
    server = short if failure in ("lock_timeout", "timeout") else long
    outcome = OUTCOMES[failure]
    started = tmp_path / "started"

    if failure == "lock_timeout":
        release = tmp_path / "release"
        hold = {"started": str(started), "release": str(release)}
        holding = launcher.call(way, "holder_hold", hold)  # (any call holding the lock)
        wait_for("the holder holding the lock", started.exists)
        tool = f"{server}_change"
        try:
            before = launcher.observe()
            answer = launcher.reply(launcher.call(way, tool, {}))
        finally:
            release.touch()
        held = launcher.reply(holding)["result"]
        assert (held["isError"], held["content"][0]["text"]) == (False, "released")
    elif failure == "timeout":
        tool = f"{server}_slow"
        before = launcher.observe()
        answer = launcher.reply(launcher.call(way, tool, {"started": str(started)}))
        assert started.exists()  # (it ran, and ran out of time)
    elif failure == "refusal":
        tool = f"{server}_slow"
        down = launcher.errlog.parent / f"{server}.down"  # (a command: server's restart waits)
        down.touch()
        try:
            ended = launcher.ended_sessions(server)
            launcher.reply(launcher.call(way, f"{server}_die", {}))
            launcher.wait_down(server, ended)
            before = launcher.observe()
            answer = launcher.reply(launcher.call(way, tool, {"started": str(started)}))
            assert not started.exists()  # (refused: it never ran)
        finally:
            down.unlink()
            if server in getattr(launcher, "url_servers", {}):
                launcher.url_servers[server].again()
            launcher.wait_up(way, server)
    elif failure == "crash":
        tool = f"{server}_crash"
        before = launcher.observe()
        try:
            answer = launcher.reply(launcher.call(way, tool, {}))
        finally:
            if server in getattr(launcher, "url_servers", {}):
                launcher.url_servers[server].again()
            launcher.wait_up(way, server)
    else:
        tool = f"{server}_slow"
        before = launcher.observe()
        pending = launcher.call(way, tool, {"started": str(started)})
        wait_for("the call running", started.exists)
        launcher.cancel(pending)
        check_recorded(launcher, before, server, tool, outcome)
        assert launcher.unanswered(pending) is None  # no result: the call was cancelled
        return

    check_recorded(launcher, before, server, tool, outcome)
    assert named(text_of(answer), server, tool) == ANSWERS[failure]
