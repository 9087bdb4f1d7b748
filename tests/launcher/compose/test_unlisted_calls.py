"""``unlisted_owner``: which external server a call of a tool nobody lists is asked of; only
one that nothing else could have meant, never the first namespace that fits (greedy)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import mcp_types
import pytest

from doc_processing_std_tools.launcher.compose.mount import Mount
from doc_processing_std_tools.launcher.compose.unlisted_calls import unknown_tool, unlisted_owner
from doc_processing_std_tools.launcher.config.schema import ServerEntry


def _mount(
    name: str,
    namespace: str | None,
    *,
    external: bool = True,
    state: str = "up",
    every_tool: tuple[str, ...] = (),
) -> Mount:
    source: dict[str, Any] = {"command": "node"} if external else {"server": "memory-tools"}
    entry = ServerEntry(namespace=namespace, **source)
    supervisor: Any = SimpleNamespace(state=state) if external else None
    return Mount(
        name=name,
        spec=None,
        entry=entry,
        settings=None,
        server=SimpleNamespace(),  # type: ignore[arg-type]
        supervisor=supervisor,
        every_tool=frozenset(every_tool),
    )


def test_the_one_namespace_that_fits_names_the_server() -> None:
    ev, fs = _mount("everything", "ev"), _mount("files", "fs")
    memory = _mount("memory", None, external=False, every_tool=("write_memory",))
    assert unlisted_owner([memory, fs, ev], "ev_get-roots-list") == (ev, "get-roots-list")


@pytest.mark.parametrize(
    ("mounts", "name"),
    [
        # an un-namespaced external server could serve any name, ev_x included
        pytest.param(
            [_mount("everything", "ev"), _mount("plain", None)], "ev_x", id="un-namespaced"
        ),
        pytest.param(
            [_mount("plain", None), _mount("everything", "ev")], "ev_x", id="un-namespaced-first"
        ),
        # two servers share the namespace
        pytest.param([_mount("everything", "ev"), _mount("more", "ev")], "ev_x", id="two-fit"),
        # an in-process server has the name (not exposed, or under a namespace that fits)
        pytest.param(
            [
                _mount("everything", "ev"),
                _mount("memory", None, external=False, every_tool=("ev_x",)),
            ],
            "ev_x",
            id="in-process-name",
        ),
        pytest.param(
            [_mount("everything", "ev"), _mount("memory", "ev", external=False)],
            "ev_x",
            id="in-process-namespace",
        ),
        # the server itself had it and its rules leave it out
        pytest.param(
            [_mount("everything", "ev", every_tool=("ev_x",))], "ev_x", id="its-own-listed"
        ),
        pytest.param([_mount("everything", "ev", state="restarting")], "ev_x", id="down"),
        pytest.param([_mount("everything", "ev")], "ev_", id="namespace-only"),
        pytest.param([_mount("everything", "ev")], "evx", id="no-joiner"),
        pytest.param([_mount("everything", "ev")], "search_tools", id="launcher-name"),
    ],
)
def test_a_name_another_server_could_have_meant_stays_unknown(
    mounts: list[Mount], name: str
) -> None:
    assert unlisted_owner(mounts, name) is None


def test_only_fastmcps_own_unknown_tool_answer_counts() -> None:
    name = "ev_x"
    answer = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=f"Unknown tool: {name!r}")],
        is_error=True,
    )
    assert unknown_tool(answer, name)
    assert unknown_tool(answer.model_dump(by_alias=True, mode="json", exclude_none=True), name)
    assert not unknown_tool(answer, "ev_y")
    assert not unknown_tool({"content": answer.model_dump()["content"], "isError": False}, name)
