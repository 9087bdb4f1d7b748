"""The pins' verdicts (launcher/calls/pin_gate.py): what is served, what a call answers, what is
reported, and how many definitions drifted."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from doc_processing_std_tools.launcher.calls.pin_gate import PinGate
from doc_processing_std_tools.launcher.calls.pins import LockFile

READ = {"name": "read", "description": "Read a note.", "inputSchema": {"type": "object"}}
CHANGED = {**READ, "description": "Read a note, then mail it."}


def locked(**tools: dict) -> LockFile:
    pins = LockFile()
    pins.approve({"notes": {"tools": tools}})
    return pins


def test_block_serves_only_what_was_approved_and_says_why_in_one_line() -> None:
    gate = PinGate("block", locked(read=READ))
    assert gate.judge("notes", "tools", READ) is None
    changed = gate.judge("notes", "tools", CHANGED)
    assert changed is not None and changed.problem == "changed" and not gate.serves(changed)
    text = gate.refusal(changed, "notes_read")
    assert "'notes_read' is not served: its definition changed since it was approved" in text
    assert "dpt-launch pins approve notes.read" in text and "\n" not in text
    new = gate.judge("notes", "tools", {**READ, "name": "new"})
    assert new is not None and new.problem == "not pinned"
    assert "never approved" in gate.refusal(new, "new")
    assert gate.judge("other", "tools", READ).problem == "not pinned"  # type: ignore[union-attr]


def test_warn_serves_everything_and_hidden_text_counts_without_a_lock_file() -> None:
    hidden = {**READ, "description": "Read a\u200b note."}
    gate = PinGate("warn")
    assert gate.judge("notes", "tools", READ) is None
    finding = gate.judge("notes", "tools", hidden)
    assert finding is not None and finding.problem == "hidden text" and finding.detail == "U+200B"
    assert gate.serves(finding)
    assert not PinGate("block").serves(finding)


def test_each_problem_is_reported_once_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "dpt-launch")
    gate = PinGate("block", locked(read=READ, gone={**READ, "name": "gone"}))
    for _ in range(3):
        verdict = gate.judge("notes", "tools", CHANGED)
        gate.listed("notes", "tools", {"read": CHANGED}, {"read": verdict})
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2, messages
    assert "tool notes.read changed: not served (pins.policy: block)" in messages[0]
    assert "pinned tool 'gone' is gone from the server" in messages[1]
    assert gate.drifted() == 2 and gate.drifted_of("notes") == 2

    gate.use("block", locked(read=CHANGED), None)  # (a reload with the change approved)
    assert gate.judge("notes", "tools", CHANGED) is None
    assert gate.drifted() == 0
    gate.forget({"notes"})
    assert gate.findings() == []


def test_a_listing_of_task_tools_only_adds_to_the_last_full_one() -> None:
    gate = PinGate("block", locked(read=READ))
    gate.listed("notes", "tools", {"read": READ}, {"read": None})
    gate.listed("notes", "tools", {}, {}, full=False)  # (fastmcp's start-up pass)
    assert gate.served["notes"]["tools"] == {"read": READ}
    assert gate.drifted() == 0


def test_a_server_missing_from_the_lock_file_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """A lock file written for another config: one WARNING per server, naming the fix."""
    caplog.set_level(logging.WARNING, "dpt-launch")
    config = Path("/cfg/b.yaml")
    gate = PinGate("warn", locked(read=READ), Path("/cfg/tools.lock"), config)
    second = {**READ, "name": "second"}
    definitions = {"read": READ, "second": second}
    verdicts = {name: gate.judge("other", "tools", item) for name, item in definitions.items()}
    gate.listed("other", "tools", definitions, verdicts)
    gate.listed(
        "other",
        "prompts",
        {"p": {"name": "p"}},
        {"p": gate.judge("other", "prompts", {"name": "p"})},
    )
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "servers.other has no entry in tools.lock (a lock file written for another config?): "
        "they are served anyway (pins.policy: warn); review with `dpt-launch pins diff "
        "--config /cfg/b.yaml`, then approve this server with `dpt-launch pins approve "
        "--config /cfg/b.yaml other`, or give this config its own lock file (pins.lock_file)"
    ]
    assert gate.drifted() == 3  # (each still counts)
