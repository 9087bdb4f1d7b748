"""Tasks (``tasks`` capability, ``tasks/get``, ``tasks/result``, ``tasks/list``,
``tasks/cancel``) of external servers, as a direct connection has them (issue #34).

A server that declares ``tasks`` may list tools a client can only call as a task
(``execution.taskSupport: required``). The root declares ``tasks`` as the first external server
that does (with none, a task-only tool is not listed: no task could be made for it); a
task-augmented ``tools/call`` is relayed with its ``task`` (``ToolRelay``), which
notes the id of the task the server made; :class:`Tasks` sends each ``tasks/*`` request for that
id to that server, tied to the asking client (what the server asks meanwhile, an elicitation
of an ``input_required`` task, reaches it), and its answer or error back as it is. A
``tasks/list`` asks every external server that declares ``tasks``. An in-process server's
tasks are fastmcp's own and not served through the root.

A 2026-era (stateless) client is not offered tasks: in that protocol they are an extension
(``io.modelcontextprotocol/tasks``, SEP-2663) with requests of their own, which the launcher does
not translate to its servers' handshake-era ``tasks/*``; its tool list leaves out the tools that
can only run as a task (a call of one could only fail), and a task-augmented call of its goes
through fastmcp, as it would to fastmcp alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from fastmcp.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ...seams.client_sessions import send_raw_request
from ...seams.fastmcp_server import add_server_middleware
from ..external.result_links import exposed_links
from .completions import with_capability

log = logging.getLogger(__name__)

TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})


class Tasks:
    """An SDK server middleware: ``tasks`` declared and ``tasks/*`` forwarded (see the module)."""

    def __init__(self, composition: Any) -> None:
        self.composition = composition

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method in TASK_METHODS:
            return await self.forward(ctx)
        result = await call_next(ctx)
        if ctx.method == "initialize":
            declared = next((told for _, told in self.offering()), None)
            if declared is not None:
                return with_capability(result, "tasks", declared)
        elif ctx.method == "tools/list" and isinstance(result, dict):
            tools = result.get("tools")
            if not isinstance(tools, list):
                return result
            if ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
                # A 2026-era client: its tasks are an extension not served here, so no task
                # can be made for it (its list no longer says which tools need one)
                hidden = self.composition.owners().task_only
                if hidden:
                    kept = [
                        t for t in tools if not (isinstance(t, dict) and t.get("name") in hidden)
                    ]
                    return {**result, "tools": kept}
            elif any(map(_task_only, tools)) and next(self.offering(), None) is None:
                # (no task can be made here)
                return {**result, "tools": [t for t in tools if not _task_only(t)]}
        return result

    def offering(self) -> Iterator[tuple[Any, Any]]:
        """(mount, its ``tasks`` capability) for each connected external server declaring it."""
        for mount in self.composition.mounts:
            client = mount.supervisor.front.client if mount.supervisor is not None else None
            told = client.initialize_result if client is not None else None
            if told is not None and told.capabilities.tasks is not None:
                yield mount, told.capabilities.tasks

    async def forward(self, ctx: Any) -> Any:
        params = dict(ctx.params or {})
        if ctx.method == "tasks/list":
            mounts = [mount for mount, _ in self.offering()]
            if not mounts:
                raise MCPError(METHOD_NOT_FOUND, "Method not found", ctx.method)
            if len(mounts) == 1:
                answer = await self._ask(mounts[0], ctx, params)
                return _own_tasks(answer, mounts[0], ctx.session)
            listed: list[Any] = []
            for mount in mounts:  # (several servers: the first page of each)
                try:
                    answer = await self._ask(mount, ctx, {})
                except MCPError as exc:  # (one server down: the others' tasks still listed)
                    log.info("tasks/list: %s left out: %s", mount.name, exc.error.message)
                    continue
                listed += _own_tasks(answer, mount, ctx.session).get("tasks") or []
            return {"tasks": listed}
        task_id = params.get("taskId")
        owners = [
            m
            for m in self.composition.mounts
            if m.supervisor is not None and m.supervisor.front.owns(task_id, ctx.session)
        ]
        if len(owners) != 1:  # (another client's task is as unknown to this one as no task)
            why = "unknown task" if not owners else "ambiguous task (two servers made one)"
            raise MCPError(INVALID_PARAMS, f"{why} {str(task_id)[:100]!r}")
        mount = owners[0]
        result = await self._ask(mount, ctx, params)
        if ctx.method == "tasks/result" and isinstance(result, dict):
            result = exposed_links(result, mount.entry.namespace)
        return result

    async def _ask(self, mount: Any, ctx: Any, params: dict[str, Any]) -> Any:
        """Ask on the session the client's tasks live on: its own upstream session when the
        server gives each client one (``sessions: per_client``), else the shared one."""
        supervisor = mount.supervisor
        try:
            own = await supervisor.own_session(ctx.session)
            if own is not None and own.link is not None:
                front, client = own.link, own.client
            else:
                front, client = supervisor.front, await supervisor.client()
        except ToolError as exc:  # (down, restarting: why)
            raise MCPError(INTERNAL_ERROR, str(exc)) from None
        with front.calling(ctx.session, ctx.request_id):
            return await send_raw_request(client, ctx.method, params)


def _own_tasks(answer: Any, mount: Any, session: Any) -> Any:
    """A ``tasks/list`` *answer* of *mount*'s server cut to the tasks made for client *session*
    (the server's session is shared by every client: it lists theirs too)."""
    tasks = answer.get("tasks") if isinstance(answer, dict) else None
    if not isinstance(tasks, list):
        return answer
    front = mount.supervisor.front
    own = [t for t in tasks if isinstance(t, dict) and front.owns(t.get("taskId"), session)]
    return {**answer, "tasks": own}


def _task_only(tool: Any) -> bool:
    """Whether a listed *tool* can only be called as a task (``execution.taskSupport``)."""
    execution = tool.get("execution") if isinstance(tool, dict) else None
    return isinstance(execution, dict) and execution.get("taskSupport") == "required"


def install_tasks(composition: Any) -> Tasks:
    tasks = Tasks(composition)
    add_server_middleware(composition.root, tasks)
    return tasks
