"""One call policy on every path (issue 33 §1): the same failures through every way a tool call
can go, each ending with the same outcome label, exactly one count in ``dpt_tool_calls_total``,
exactly one span, exactly one audit line (issue 36 §3: written before the answer, so it is in
the file when the answer arrives), and the same answer text once the tool's and server's names
are taken out. A call over a rate limit (issue 36 §4), and a call its caller may not make
(issue 36 §2, ``access:``), are more failures, refused the same way on every path.

Real parts: two launchers (``tests/helpers/servers/policy_launcher.py``: the real CLI, its telemetry read
exactly), one over stdio and one over streamable HTTP, each shared by the cells of its ways;
``command:`` servers are child processes (``tests/helpers/servers/policy_server.py``), ``url:`` servers are
processes serving a port this module holds (``tests/helpers/servers/policy_url_server.py``), the in-process
server is ``tests/helpers/servers/policy_plain_server.py``. Each cell waits on what it can observe (a marker
file a tool writes, a reply, a metric, a server's state), never on time passing, and leaves
its servers up.

The ways a call goes (``docs/architecture.md``, "One tool call"):

- ``inprocess``: an in-process tool over HTTP: the SDK server, fastmcp, ``PolicedTool``.
- ``plain``: an in-process tool's plain call on the stdio fast path (popoto-memory's way).
- ``stdio-task``: a ``command:`` server's call on the stdio fast path (in a task; with a
  progress token, so its progress is relayed too).
- ``stdio-sdk``: over stdio, the SDK path's relay (``ToolRelay._relay``), taken while the
  server is down.
- ``http-sdk``: a ``command:`` server's call relayed over HTTP (``ToolRelay._relay``).
- ``url``: a ``url:`` server's call relayed over HTTP.
- ``search``: ``call_tool`` of a profile in search mode (``ProfileGate``), over HTTP.
- ``proxy``: a call the relay steps aside for (a param beyond name, arguments and _meta):
  fastmcp's proxy of the ``command:`` server.
"""

from __future__ import annotations

import getpass
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

from doc_processing_std_tools.launcher.calls.policy import CallPolicy, LockMode, ToolRules
from doc_processing_std_tools.launcher.external.supervisor import SESSION_CLOSED
from helpers.launch import SERVING_LINE, wait_until_serving
from helpers.paths import SERVERS, python_path
from helpers.rpc import initialize_params, message, reply_message, request, rpc_headers
from helpers.stdio_wire import INITIALIZE, INITIALIZED

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("prometheus_client")
# (a cell may start a launcher, then wait for a server to start again: START each, on a busy
# machine)
pytestmark = pytest.mark.timeout(300)

LAUNCHER = SERVERS / "policy_launcher.py"
EXTERNAL = SERVERS / "policy_server.py"
URL_SERVER = SERVERS / "policy_url_server.py"
PLAIN = "helpers.servers.policy_plain_server:create"
SHORT = 0.5  # seconds: the timeout of the servers whose calls run out of time
START = 90.0  # seconds a launcher and its servers have to start, or a server to start again
WAIT = 30.0  # seconds anything else awaited has to come
OBSERVER_LINE = re.compile(r"policy observer on port (\d+)")
SAMPLE = re.compile(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$")

FAILURES = (
    "lock_timeout",
    "timeout",
    "refusal",
    "crash",
    "cancelled",
    "rate_limited",
    "access_denied",
)
OUTCOMES = {
    "lock_timeout": "lock_timeout",
    "timeout": "timeout",
    "refusal": "unavailable",
    "crash": "unavailable",
    "cancelled": "cancelled",
    "rate_limited": "rate_limited",
    "access_denied": "denied",
}
AUDIT = "audit.jsonl"  # beside each launcher's config
# one call of each long-timeout server's "change" an hour, per user and tool: the second is refused
RATE_LIMITS = "rate_limits:\n  - {tools: '*long_change', rate: 1/h, burst: 1, per: user_tool}\n"
# every caller may use every tool but the long-timeout servers' "secret"
ACCESS = "access:\n  - {exclude: '*long_secret'}\n"
RETRY = re.compile(r"retry in \d+ s")
_NAMED = CallPolicy(ToolRules(server="<server>", tool="<tool>", lock=LockMode.HELD, timeout=SHORT))
# The answer each failure gets, on every path: the policy's own text; a server that went down
# says so in its supervisor's words, whether the call or the supervisor saw it first (these
# servers write nothing to stderr, so command: and url: servers say the same).
ANSWERS = {
    "lock_timeout": _NAMED.timeout_text(waited_for_lock=True),
    "timeout": _NAMED.timeout_text(),
    "refusal": f"server '<server>' is restarting (attempt 1): {SESSION_CLOSED}",
    "crash": f"server '<server>' is restarting (attempt 1): {SESSION_CLOSED}",
    "rate_limited": (
        "rate limit: '<tool>' was called too often by '<user>'; retry in N s "
        "(rate_limits[0]: 1/h, burst 1)"
    ),
    "access_denied": "access denied: '<user>' may not call '<tool>' (no rule of access: allows it)",
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
        # (the stdio ways first, then the HTTP ones: cells that share a launcher stay together
        # when xdist splits the module between workers)
        Way("plain", "stdio", ("plainshort", "plainlong")),
        Way("stdio-task", "stdio", ("cmdshort", "cmdlong"), progress=True),
        Way("stdio-sdk", "stdio", ("cmdshort", "cmdlong")),
        Way("inprocess", "http", ("inpshort", "inplong")),
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
    ("stdio-task", "refusal"): (
        "the fast path never takes a call to a server that is down: the SDK path answers it "
        "(the stdio-sdk cell)"
    ),
    **{("stdio-sdk", f): SDK_ONLY_WHILE_DOWN for f in FAILURES if f != "refusal"},
}


# The README's test command runs every failure on the in-process path (one launcher, over HTTP);
# the slow lane runs every path (each starts launchers of its own, and a url: server's crash
# waits for its restart).
DEFAULT_LANE_WAYS = {"inprocess"}


def cells() -> Iterator[Any]:
    for way in WAYS:
        for failure in FAILURES:
            why = NOT_APPLICABLE.get((way, failure))
            marks = [pytest.mark.skip(reason=f"not applicable: {why}")] if why else []
            if way not in DEFAULT_LANE_WAYS:
                marks.append(pytest.mark.slow)
            yield pytest.param(way, failure, id=f"{way}-{failure}", marks=marks)


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT) -> Any:
    """*check*'s first true value, asked until *timeout* passes."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.05)
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
    """A ``policy_launcher.py`` process: its stderr, its observer, the calls its cells expect.

    Each transport says how a call is made (:meth:`call`, then :meth:`reply`), cancelled
    (:meth:`cancel`, :meth:`unanswered`), and how a server is seen to go down and come back.
    """

    url_servers: dict[str, UrlServer]

    def __init__(self, proc: subprocess.Popen[bytes], errlog: Path) -> None:
        self.proc, self.errlog = proc, errlog
        self.url_servers = {}
        self.observer = int(self.starting(lambda: OBSERVER_LINE.search(self.stderr())).group(1))
        # (server, tool, outcome) of every call a cell checked: nothing else may be recorded
        # for those tools by the end (a second record coming late would be counted there)
        self.expected: Counter[tuple[str, str, str]] = Counter()

    def starting(self, seen: Callable[[], Any]) -> Any:
        """What *seen* finds once the process shows it (within START); else the process is
        stopped and the test fails."""
        try:
            return wait_for("the launcher starting", lambda: seen() or self.exited(), START)
        except BaseException:
            self.stop()
            raise

    def exited(self) -> bool:
        assert self.proc.poll() is None, f"the launcher exited: {self.stderr()[-2000:]}"
        return False

    def call(self, way: Way, tool: str, arguments: dict[str, Any]) -> Any:
        raise NotImplementedError

    def reply(self, sent: Any, timeout: float = WAIT) -> dict[str, Any]:
        raise NotImplementedError

    def cancel(self, sent: Any) -> None:
        raise NotImplementedError

    def unanswered(self, sent: Any) -> dict[str, Any] | None:
        """The result a cancelled call got, if any."""
        raise NotImplementedError

    def wait_up(self, way: Way, server: str) -> None:
        raise NotImplementedError

    def take_down(self, way: Way, server: str) -> None:
        """*server*'s process kills itself; return once the launcher knows it is down."""
        raise NotImplementedError

    def bring_back(self, way: Way, server: str) -> None:
        """After *server*'s process died: until the launcher has it up again."""
        url = self.url_servers.get(server)
        if url is not None:
            url.again()  # (a command: server is started again by the launcher itself)
        self.wait_up(way, server)

    def stderr(self) -> str:
        return self.errlog.read_text(errors="replace")

    def audit_lines(self) -> list[dict[str, Any]]:
        """Every audit line so far (each must be whole JSON)."""
        text = (self.errlog.parent / AUDIT).read_text()
        assert not text or text.endswith("\n"), text[-200:]
        return [json.loads(line) for line in text.splitlines()]

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
        audited = Counter(
            (line["server"], line["tool"], line["outcome"])
            for line in self.audit_lines()
            if line["tool"].endswith(tools)
        )
        assert found == self.expected, (found, self.expected)
        assert spans == self.expected, (spans, self.expected)
        assert audited == self.expected, (audited, self.expected)


def spawn(config: Path, *args: str, **popen: Any) -> subprocess.Popen[bytes]:
    pythonpath = python_path()
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
        # (answered once its servers are up, or their start grace ran out)
        self.starting(lambda: 0 in self.replies or (self._read(time.monotonic() + 0.2) and None))
        assert "result" in self.replies[0], self.replies[0]
        self.send(json.loads(INITIALIZED))

    def send(self, sent: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(sent).encode() + b"\n")
        self.proc.stdin.flush()

    def _read(self, until: float) -> bool:
        """Read what stdout has before *until*; False when nothing came."""
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

    def call(self, way: Way, tool: str, arguments: dict[str, Any]) -> int:
        request_id = next(self.ids)
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if way.progress:
            params["_meta"] = {"progressToken": f"progress-{request_id}"}
        self.send(message("tools/call", params, id=request_id))
        return request_id

    def reply(self, sent: int, timeout: float = WAIT) -> dict[str, Any]:
        until = time.monotonic() + timeout
        while sent not in self.replies:
            assert self._read(until) or time.monotonic() < until, f"no reply to {sent}"
        return self.replies[sent]

    def cancel(self, sent: int) -> None:
        self.send(message("notifications/cancelled", {"requestId": sent}))

    def unanswered(self, sent: int) -> dict[str, Any] | None:
        """Whatever *sent* got by the time a later request is answered: nothing, over stdio."""
        ping = next(self.ids)
        self.send(message("ping", id=ping))
        self.reply(ping)
        return self.replies.get(sent)

    def take_down(self, way: Way, server: str) -> None:
        ended = f"servers.{server}: session ended; restarting"  # (logged once it is down)
        before = self.stderr().count(ended)
        self.reply(self.call(way, f"{server}_die", {}))
        wait_for(f"{server} down", lambda: self.stderr().count(ended) > before)

    def wait_up(self, way: Way, server: str) -> None:
        def up() -> bool:
            answer = self.reply(self.call(way, f"{server}_ready", {}))
            return answer["result"]["isError"] is False

        wait_for(f"{server} up", up, START)


# -- the HTTP launcher -------------------------------------------------------------------------


class UrlServer:
    """``policy_url_server.py`` serving a port held here: while no process serves it, the
    launcher's reconnects wait in its backlog; a new process takes over the same port."""

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
            [sys.executable, str(URL_SERVER), str(fd)], pass_fds=(fd,), stderr=subprocess.DEVNULL
        )

    def again(self) -> None:
        """Serve again once the process is gone (one of its tools killed it)."""
        assert self.proc is not None
        self.proc.wait(timeout=WAIT)
        self.start()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.listener.close()


@dataclass(frozen=True)
class Posted:
    """A call POSTed in a worker thread: its request id, where it went, what came back."""

    endpoint: str
    request_id: int
    response: Future[Any]


class HttpLauncher(Launcher):
    """A launcher serving streamable HTTP; a call is one POST, answered in a worker thread."""

    def __init__(self, config: Path, url_servers: dict[str, UrlServer]) -> None:
        errlog = config.parent / "stderr.log"
        with errlog.open("wb") as err:
            proc = spawn(
                config,
                *("--transport", "http", "--port", "0"),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        super().__init__(proc, errlog)
        self.url_servers = url_servers
        self.port = int(self.starting(lambda: SERVING_LINE.search(self.stderr())).group(2))
        self.starting(self._health)
        # (a cancelled call's POST stays open, unanswered, until the launcher stops: a thread
        # each, one per way)
        self.pool = ThreadPoolExecutor(4 + len(WAYS))
        self.sessions: dict[str, str] = {}
        self.ids = itertools.count(1)

    def _health(self) -> bool:
        wait_until_serving(self.port, START)
        return True

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

    def call(self, way: Way, tool: str, arguments: dict[str, Any]) -> Posted:
        request_id = next(self.ids)
        params: dict[str, Any] = {"name": tool, "arguments": arguments, **way.extra}
        if way.via_call_tool:
            params = {"name": "call_tool", "arguments": {"name": tool, "arguments": arguments}}
        sent = message("tools/call", params, id=request_id)
        session = self.session(way.endpoint)
        response = self.pool.submit(self.post, way.endpoint, sent, session)
        return Posted(way.endpoint, request_id, response)

    def reply(self, sent: Posted, timeout: float = WAIT) -> dict[str, Any]:
        answer = sent.response.result(timeout)
        assert answer.status == 200, answer
        return reply_message(answer.headers["content-type"], answer.body, sent.request_id)

    def cancel(self, sent: Posted) -> None:
        note = message("notifications/cancelled", {"requestId": sent.request_id})
        assert self.post(sent.endpoint, note, self.session(sent.endpoint)).status == 202

    def unanswered(self, sent: Posted) -> dict[str, Any] | None:
        """Whatever a cancelled call's POST got by the time a later request of its session is
        answered: nothing (MCP: no reply to a cancelled request; its stream stays open)."""
        ping = message("ping", id=next(self.ids))
        answer = self.post(sent.endpoint, ping, self.session(sent.endpoint))
        assert answer.status == 200, answer
        assert not sent.response.done(), sent.response.result()
        return None

    def metrics_text(self) -> str:  # (the launcher's own /metrics: the same registry)
        reply = request(self.port, "GET", "/metrics")
        assert reply.status == 200, reply
        return reply.body.decode()

    def state(self, server: str, state: str) -> bool:
        return parse_metrics(self.metrics_text())[1].get((server, state)) == 1

    def take_down(self, way: Way, server: str) -> None:
        self.reply(self.call(way, f"{server}_die", {}))
        wait_for(f"{server} down", lambda: self.state(server, "restarting"))

    def wait_up(self, way: Way, server: str) -> None:
        wait_for(f"{server} up", lambda: self.state(server, "up"), START)

    def stop(self) -> None:
        super().stop()
        self.pool.shutdown(wait=False, cancel_futures=True)


# -- fixtures ----------------------------------------------------------------------------------

CHECKED_TOOLS = (
    "_slow",
    "_change",
    "_crash",
    "_secret",
)  # the tools whose every call a cell checks


def external(name: str, timeout: float, down_file: Path | None = None) -> str:
    down = f", --down-file, '{down_file}'" if down_file else ""
    return (
        f"  {name}:\n    command: {sys.executable}\n"
        f"    args: ['{EXTERNAL}'{down}]\n"
        f"    namespace: {name}\n    timeout: {timeout}\n"
        "    sessions: shared\n"  # (a cell takes the server's one process down)
    )


def in_process(name: str, timeout: float) -> str:
    return f"  {name}: {{module: '{PLAIN}', namespace: {name}, timeout: {timeout}}}\n"


@pytest.fixture(scope="module")
def stdio_launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StdioLauncher]:
    folder = tmp_path_factory.mktemp("stdio")
    config = folder / "tools.yaml"
    config.write_text(
        f"audit: {{path: {AUDIT}}}\n"
        + RATE_LIMITS
        + ACCESS
        + "servers:\n"
        + in_process("holder", 60)
        + in_process("plainshort", SHORT)
        + in_process("plainlong", 60)
        + external("cmdshort", SHORT)
        + external("cmdlong", 60, folder / "cmdlong.down")
    )
    launcher = None
    try:
        launcher = StdioLauncher(config)
        for server in ("cmdshort", "cmdlong"):
            launcher.wait_up(WAYS["stdio-task"], server)
        yield launcher
        launcher.check_nothing_more(CHECKED_TOOLS)
    finally:
        if launcher is not None:
            launcher.stop()


@pytest.fixture(scope="module")
def http_launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpLauncher]:
    folder = tmp_path_factory.mktemp("http")
    config = folder / "tools.yaml"
    url_servers = {"urlshort": UrlServer(), "urllong": UrlServer()}
    urls = "".join(
        f"  {name}: {{url: '{server.url}', namespace: {name}, timeout: {timeout}, "
        "sessions: shared}\n"
        for (name, server), timeout in zip(url_servers.items(), (SHORT, 60), strict=True)
    )
    config.write_text(
        f"audit: {{path: {AUDIT}}}\n"
        + RATE_LIMITS
        + ACCESS
        + "profiles:\n  finder: {search: always}\n"
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
        for url_server in url_servers.values():
            url_server.close()


# -- the cells ---------------------------------------------------------------------------------


@dataclass
class Cell:
    """One failure made to happen on one way: the call checked, and what was seen before it."""

    launcher: Launcher
    way: Way
    server: str
    folder: Path
    tool: str = ""
    before: Observed | None = None
    audited: int = 0  # audit lines before the call
    sent: Any = None

    def start(self, own_name: str, arguments: dict[str, Any]) -> Any:
        self.tool = f"{self.server}_{own_name}"
        self.before = self.launcher.observe()
        self.audited = len(self.launcher.audit_lines())
        self.sent = self.launcher.call(self.way, self.tool, arguments)
        return self.sent

    def audit_lines(self) -> list[dict[str, Any]]:
        """The audit lines of this call's tool since it started."""
        lines = self.launcher.audit_lines()[self.audited :]
        return [line for line in lines if line["tool"] == self.tool]


def lock_timeout(cell: Cell) -> dict[str, Any]:
    """Another call that changes state holds the process lock past this call's deadline."""
    launcher, started, release = cell.launcher, cell.folder / "started", cell.folder / "release"
    hold = {"started": str(started), "release": str(release)}
    holding = launcher.call(cell.way, "holder_hold", hold)
    wait_for("the holder holding the lock", started.exists)
    try:
        answer = launcher.reply(cell.start("change", {}))
    finally:
        release.touch()
    held = launcher.reply(holding)["result"]
    assert (held["isError"], held["content"][0]["text"]) == (False, "released")
    return answer


def timeout(cell: Cell) -> dict[str, Any]:
    """The tool runs past the deadline."""
    started = cell.folder / "started"
    answer = cell.launcher.reply(cell.start("slow", {"started": str(started)}))
    assert started.exists()  # (it ran, and ran out of time)
    return answer


def refusal(cell: Cell) -> dict[str, Any]:
    """The server is down (restarting, and its new process waits) when the call comes."""
    launcher, started = cell.launcher, cell.folder / "started"
    down = launcher.errlog.parent / f"{cell.server}.down"  # (read by a command: server's start)
    down.touch()
    try:
        launcher.take_down(cell.way, cell.server)
        answer = launcher.reply(cell.start("slow", {"started": str(started)}))
        assert not started.exists()  # (refused: it never ran)
    finally:
        down.unlink()
        launcher.bring_back(cell.way, cell.server)
    return answer


def crash(cell: Cell) -> dict[str, Any]:
    """The server's process dies during the call."""
    try:
        return cell.launcher.reply(cell.start("crash", {}))
    finally:
        cell.launcher.bring_back(cell.way, cell.server)


def cancelled(cell: Cell) -> None:
    """The client cancels the call while it runs: it gets no result."""
    started = cell.folder / "started"
    sent = cell.start("slow", {"started": str(started)})
    wait_for("the call running", started.exists)
    cell.launcher.cancel(sent)


def rate_limited(cell: Cell) -> dict[str, Any]:
    """The call comes after the one call an hour its limit allows: refused, nothing done.

    (The ways that share a launcher and a server share its bucket too: the first of them
    makes the allowed call, the others are refused at once.)
    """
    launcher = cell.launcher
    answer = launcher.reply(cell.start("change", {}))
    if answer["result"]["isError"] is False:  # the allowed call, recorded as any other
        check_recorded(cell, "ok")
        check_audited(cell, "ok")
        answer = launcher.reply(cell.start("change", {}))
    return answer


def access_denied(cell: Cell) -> dict[str, Any]:
    """The caller may not call the tool (``access:``): refused, nothing done."""
    return cell.launcher.reply(cell.start("secret", {}))


RUNS: dict[str, Callable[[Cell], dict[str, Any] | None]] = {
    "lock_timeout": lock_timeout,
    "timeout": timeout,
    "refusal": refusal,
    "crash": crash,
    "cancelled": cancelled,
    "rate_limited": rate_limited,
    "access_denied": access_denied,
}


def check_recorded(cell: Cell, outcome: str) -> None:
    """The call was recorded exactly once, as *outcome*: one count, one span."""
    launcher, server, tool, before = cell.launcher, cell.server, cell.tool, cell.before
    assert before is not None

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


def check_audited(cell: Cell, outcome: str, *, answered: bool = True) -> None:
    """The call has exactly one audit line, saying *outcome*, who called and from where. An
    answered call's line was written before its answer: it is in the file already."""
    lines = cell.audit_lines() if answered else wait_for("an audit line", cell.audit_lines)
    assert [line["outcome"] for line in lines] == [outcome], lines
    line = lines[0]
    assert line["server"] == cell.server and line["client"] in ("raw", "test"), line
    if cell.way.transport == "stdio":
        assert line["user"] == getpass.getuser() and line["session"].startswith("stdio-"), line
    else:
        assert line["user"] == "anonymous", line
        assert line["session"] == cell.launcher.sessions[cell.way.endpoint], line  # type: ignore[attr-defined]
    assert line["arguments_bytes"] >= 2 and len(line["arguments_sha256"]) == 64
    assert line["pin"] is None and "arguments" not in line


def named(text: str, server: str, tool: str, user: str = "") -> str:
    """*text* with the tool's, the server's and the caller's names, and a wait, taken out."""
    text = text.replace(tool, "<tool>").replace(server, "<server>")
    if user:
        text = text.replace(f"by {user!r}", "by '<user>'")
        text = text.replace(f"{user!r} may not", "'<user>' may not")
    return RETRY.sub("retry in N s", text)


def error_text(answer: dict[str, Any]) -> str:
    result = answer["result"]
    assert result["isError"] is True, answer
    return "".join(block.get("text", "") for block in result["content"])


@pytest.mark.parametrize(("way_name", "failure"), list(cells()))
def test_every_path_ends_a_failed_call_the_same_way(
    way_name: str, failure: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    way = WAYS[way_name]
    launcher: Launcher = request.getfixturevalue(f"{way.transport}_launcher")
    short, long = way.servers
    server = short if failure in ("lock_timeout", "timeout") else long
    cell = Cell(launcher, way, server, tmp_path)
    answer = RUNS[failure](cell)
    check_audited(cell, OUTCOMES[failure], answered=answer is not None)
    check_recorded(cell, OUTCOMES[failure])
    if answer is None:
        assert launcher.unanswered(cell.sent) is None  # cancelled: no result
    else:
        user = getpass.getuser() if way.transport == "stdio" else "anonymous"
        assert named(error_text(answer), cell.server, cell.tool, user) == ANSWERS[failure]
