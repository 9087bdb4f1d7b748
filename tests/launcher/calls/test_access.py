"""Per-user access (``access:``): the rules' matching, the config's forms and errors, and the
policy's refusal (one line, outcome ``denied``, a WARNING naming the user, an audit line)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest

from doc_processing_std_tools.launcher.calls.access import Access
from doc_processing_std_tools.launcher.calls.audit import AuditLog, Caller
from doc_processing_std_tools.launcher.calls.failures import CallFailed
from doc_processing_std_tools.launcher.calls.guards import CallGuards
from doc_processing_std_tools.launcher.calls.policy import CallPolicy, LockMode, ToolRules
from doc_processing_std_tools.launcher.config import ConfigError, load_config
from doc_processing_std_tools.launcher.config.access import AccessRule
from doc_processing_std_tools.telemetry import Outcome

ALICE = Caller("alice", claims={"sub": "alice", "groups": ["admins", "staff"]})
BOB = Caller("bob", claims={"sub": "bob", "roles": "reader writer"})
TOKEN = Caller("token-2", claims={})  # a static token: verified, no claims
LOCAL = Caller("me")  # stdio: nothing verified


def access(*rules: dict[str, Any]) -> Access:
    return Access([AccessRule.model_validate(rule) for rule in rules])


def test_no_rule_allows_nothing() -> None:
    rules = access()
    assert not rules.allows_tool(ALICE, "memory", "memory_read")
    assert not rules.allows_profile(LOCAL, "finder")


def test_a_rule_naming_no_one_applies_to_every_caller_also_over_stdio() -> None:
    rules = access({"servers": "memory", "exclude": ["*_delete*"]})
    for caller in (ALICE, TOKEN, LOCAL, Caller("anonymous")):
        assert rules.allows_tool(caller, "memory", "memory_read")
        assert not rules.allows_tool(caller, "memory", "memory_delete_entity")
        assert not rules.allows_tool(caller, "fs", "fs_read")


def test_users_and_claims_need_a_verified_caller() -> None:
    rules = access(
        {"users": ["alice"], "tools": "fs_*"},
        {"claims": {"roles": ["writer"]}, "servers": ["memory"]},
        {"users": "token-*", "tools": "memory_read*"},
    )
    assert rules.allows_tool(ALICE, "fs", "fs_write")
    assert not rules.allows_tool(ALICE, "memory", "memory_read")
    assert rules.allows_tool(BOB, "memory", "memory_write")  # (a space-separated claim)
    assert not rules.allows_tool(BOB, "fs", "fs_write")
    assert rules.allows_tool(TOKEN, "memory", "memory_read_graph")
    # the local user over stdio is named "me", "alice" or anything: no rule naming users applies
    for local in (LOCAL, Caller("alice"), Caller("token-2")):
        assert not rules.allows_tool(local, "fs", "fs_write")
        assert not rules.allows_tool(local, "memory", "memory_read_graph")


def test_a_servers_prompts_and_resources_go_with_a_rule_that_allows_it_whole() -> None:
    rules = access(
        {"tools": ["*_read*"]},  # everyone: the read tools of every server, nothing else
        {"users": "alice", "servers": ["memory", "fs"], "exclude": "*_write*"},
        {"claims": {"roles": "writer"}, "servers": "fs", "tools": ["*", "extra"]},
    )
    for caller in (LOCAL, TOKEN, BOB, ALICE):
        assert rules.allows_tool(caller, "memory", "memory_read")
    for caller in (LOCAL, TOKEN):
        assert not rules.allows_server(caller, "memory")
        assert not rules.allows_server(caller, "fs")
    # an exclude takes tools out of a rule, not the server's prompts and resources
    assert rules.allows_server(ALICE, "memory") and rules.allows_server(ALICE, "fs")
    assert not rules.allows_server(ALICE, "other")
    assert rules.allows_server(BOB, "fs") and not rules.allows_server(BOB, "memory")
    assert not access().allows_server(ALICE, "memory")
    assert access({}).allows_server(LOCAL, "anything")


def test_every_condition_of_a_rule_must_hold() -> None:
    rules = access({"users": ["alice", "bob"], "claims": {"groups": ["admin*"]}, "profiles": "*"})
    assert rules.allows_profile(ALICE, "finder")
    assert not rules.allows_profile(BOB, "finder")  # (no groups claim)


def test_profiles() -> None:
    rules = access({"profiles": ["small"]}, {"users": "alice", "profiles": ["admin", "small"]})
    assert rules.allows_profile(LOCAL, "small") and not rules.allows_profile(LOCAL, "admin")
    assert rules.allows_profile(ALICE, "admin")
    assert rules.profile_refusal(BOB, "admin") == (
        "access denied: 'bob' may not use profile 'admin' (no rule of access: allows it)"
    )


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(text)
    return path


def test_the_config_forms_and_errors_name_the_key(tmp_path: Path) -> None:
    servers = "servers:\n  memory: {}\n"
    assert load_config(write(tmp_path, servers)).config.access is None  # everyone, everything
    loaded = load_config(write(tmp_path, "access: []\n" + servers))
    assert loaded.config.access == []  # nobody, nothing
    loaded = load_config(
        write(tmp_path, "access:\n  - {users: alice, tools: 'memory_*'}\n" + servers)
    )
    rule = loaded.config.access[0]  # type: ignore[index]
    assert (rule.users, rule.tools, rule.servers, rule.identified, rule.whole_servers) == (
        ["alice"],
        ["memory_*"],
        ["*"],
        True,
        False,
    )
    for bad, key in (
        ("access:\n  - {user: alice}\n", "access.0.user"),
        ("access:\n  - {claims: {'bad claim': x}}\n", "access.0.claims"),
        ("access:\n  - {tools: 3}\n", "access.0.tools"),
        ("access:\n  - {servers: [memroy]}\n", "access[0].servers: no server 'memroy'"),
        ("access:\n  - {profiles: small}\n", "access[0].profiles: no profile 'small'"),
    ):
        with pytest.raises(ConfigError, match=re.escape(key)):
            load_config(write(tmp_path, bad + servers))


def test_a_rule_may_name_a_built_in_profile(tmp_path: Path) -> None:
    """/mcp/cursor is served without a profiles: entry, so a rule may name it."""
    servers = "servers:\n  memory-tools: {}\n"
    loaded = load_config(write(tmp_path, "access:\n  - {profiles: [cursor, codex]}\n" + servers))
    assert loaded.config.access[0].profiles == ["cursor", "codex"]  # type: ignore[index]
    with pytest.raises(
        ConfigError, match=re.escape("no profile 'cursr' in known profiles (claude")
    ):
        load_config(write(tmp_path, "access:\n  - {profiles: cursr}\n" + servers))


class Sink:
    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.lines.append(data)

    def close(self) -> None:
        pass


async def test_the_policy_refuses_in_one_line_logged_and_audited_as_denied(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = Sink()
    guards = CallGuards(
        AuditLog(sink),
        identify=lambda session, headers: BOB,
        access=access({"claims": {"roles": "writer"}, "exclude": "srv_secret"}),
    )
    ran = []

    async def tool() -> str:
        ran.append(1)
        return "ok"

    allowed = CallPolicy(ToolRules("srv", "srv_open", LockMode.NONE, 5), None, guards)
    assert await allowed.run(tool) == "ok"
    denied = CallPolicy(ToolRules("srv", "srv_secret", LockMode.NONE, 5), None, guards)
    with caplog.at_level(logging.WARNING, "dpt-launch"), pytest.raises(CallFailed) as refused:
        await denied.run(tool)
    assert refused.value.outcome is Outcome.DENIED and ran == [1]
    assert str(refused.value) == (
        "access denied: 'bob' may not call 'srv_secret' (no rule of access: allows it)"
    )
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "'bob'" in caplog.records[0].getMessage()
    assert [line.count(b'"outcome":"denied"') for line in sink.lines] == [0, 1]
    assert b'"user":"bob"' in sink.lines[1]
