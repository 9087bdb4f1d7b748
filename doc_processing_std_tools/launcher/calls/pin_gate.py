"""Which of a mounted server's definitions may be served, judged against the lock file.

One :class:`PinGate` per composition. Every listing of a mounted server's tools, prompts and
resource templates passes through it (:class:`~.policed_tools.PolicedListing`): at start, at
reload, on each runtime ``list_changed`` and on each client's list. A definition that differs
from the approved one, that was never approved, or that holds hidden text is left out of the
list under ``pins.policy: block`` (the default), or served with one WARNING line under
``warn``; a call of a tool left out answers :meth:`PinGate.refusal` (the tool's
:class:`~.policy.CallPolicy` refuses it, on every path).

The gate also keeps what each server last listed in full (:attr:`PinGate.served`), so the
verbs can write, compare and approve the lock file, and ``--check``, ``/ready`` and
``/metrics`` can count what drifted.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config.pins import DEFAULT_PINS_POLICY, PinsPolicy
from .pins import Finding, Kind, LockFile, drift, hidden_characters, pinned_part

log = logging.getLogger("dpt-launch")
WHAT: dict[Kind, str] = {
    "tools": "tool",
    "prompts": "prompt",
    "resourceTemplates": "resource template",
}


class PinGate:
    """The lock file's verdict on each served definition, and what each server last listed."""

    def __init__(
        self,
        policy: PinsPolicy = DEFAULT_PINS_POLICY,
        pins: LockFile | None = None,
        lock_path: Path | None = None,
        config_path: Path | None = None,
    ) -> None:
        self.policy: PinsPolicy = policy
        self.pins = pins  # None: no lock file, only hidden text counts
        self.lock_path = lock_path
        self.config_path = config_path  # (named in the fix for a server the lock file lacks)
        self.generation = 0  # bumped when the lock file or the policy changes
        # server -> kind -> own name -> definition, as the server last listed it in full
        self.served: dict[str, dict[Kind, dict[str, dict[str, Any]]]] = {}
        self._reported: set[tuple[Any, ...]] = set()
        self._counted: tuple[int, int, int] | None = None  # (generation, changes, count)
        self._changes = 0

    def use(self, policy: PinsPolicy, pins: LockFile | None, lock_path: Path | None) -> None:
        """Judge by *pins* under *policy* from now on (a reload); everything is reported again."""
        self.policy, self.pins, self.lock_path = policy, pins, lock_path
        self.generation += 1
        self._reported.clear()

    # -- one definition ----------------------------------------------------------------------

    def judge(self, server: str, kind: Kind, definition: Mapping[str, Any]) -> Finding | None:
        """What is wrong with one served definition (hidden text first), or None."""
        name = str(definition.get("name", ""))
        part = pinned_part(kind, definition)
        hidden = hidden_characters(part)
        if hidden:
            return Finding(server, kind, name, "hidden text", ", ".join(hidden))
        if self.pins is None:
            return None
        approved = self.pins.servers.get(server, {}).get(kind, {}).get(name)
        if approved is None:
            return Finding(server, kind, name, "not pinned")
        if approved != part:
            return Finding(server, kind, name, "changed")
        return None

    def serves(self, finding: Finding | None) -> bool:
        """Whether a definition with *finding* is served (under ``warn``, everything is)."""
        return finding is None or self.policy == "warn"

    def refusal(self, finding: Finding, exposed: str) -> str:
        """The one line a call of a definition left out answers (*exposed*: the client's name)."""
        what = WHAT[finding.kind]
        if finding.problem == "hidden text":
            return (
                f"{what} {exposed!r} is not served: its definition holds hidden characters "
                f"({finding.detail}) that could carry instructions a reader cannot see "
                "(pins.policy: block); the server must remove them"
            )
        why = (
            "its definition changed since it was approved"
            if finding.problem == "changed"
            else "its definition was never approved (it is not in the lock file)"
        )
        return (
            f"{what} {exposed!r} is not served: {why} (pins.policy: block); see it with "
            f"`dpt-launch pins diff`, approve it with `dpt-launch pins approve {finding.key}`, "
            "then reload the launcher"
        )

    # -- a server's listing ------------------------------------------------------------------

    def listed(
        self,
        server: str,
        kind: Kind,
        definitions: Mapping[str, Mapping[str, Any]],
        verdicts: Mapping[str, Finding | None],
        *,
        full: bool = True,
    ) -> None:
        """*server* listed *definitions* of *kind* (by own name), judged *verdicts*: remember
        them (replacing the last full listing, or adding to it when not *full*) and report each
        problem once."""
        kinds = self.served.setdefault(server, {})
        before = kinds.get(kind)
        now = dict(definitions) if full or before is None else {**before, **definitions}
        if now != before:
            kinds[kind] = {name: dict(item) for name, item in now.items()}
            self._changes += 1
        unpinned = self.unpinned(server)
        for name, finding in verdicts.items():
            if finding is None:
                continue
            if unpinned and finding.problem == "not pinned":
                self._report_unpinned_server(server)
            else:
                self._report(finding, definitions.get(name))
        if full and self.pins is not None:
            pinned = self.pins.servers.get(server, {}).get(kind, {})
            for name in sorted(set(pinned) - set(definitions)):
                self._report(Finding(server, kind, name, "removed"), None)

    def forget(self, servers: set[str]) -> None:
        """Servers no longer mounted (a reload removed them)."""
        for server in servers:
            if self.served.pop(server, None) is not None:
                self._changes += 1

    def findings(self) -> list[Finding]:
        """Every problem of what the mounted servers last listed, in a stable order."""
        return [
            finding
            for server in sorted(self.served)
            for finding in drift(self.pins, server, self.served[server])
        ]

    def drifted(self) -> int:
        """How many definitions differ from the lock file, are not in it, are gone from their
        server, or hold hidden text (``--check``, ``/ready``, ``/metrics``)."""
        key = (self.generation, self._changes)
        if self._counted is None or self._counted[:2] != key:
            self._counted = (*key, len(self.findings()))
        return self._counted[2]

    def drifted_of(self, server: str) -> int:
        """:meth:`drifted` for one server."""
        return len(drift(self.pins, server, self.served.get(server, {})))

    @property
    def lock_name(self) -> str:
        """The lock file as messages name it."""
        return self.lock_path.name if self.lock_path is not None else "the lock file"

    def unpinned(self, server: str) -> bool:
        """Whether the lock file has no entry for *server* (one written for another config):
        its definitions not pinned are told of once for the server, not one by one."""
        return self.pins is not None and server not in self.pins.servers

    def _report_unpinned_server(self, server: str) -> None:
        key = ("unpinned server", server)
        if key in self._reported:
            return
        self._reported.add(key)
        lock = self.lock_name
        config = shlex.quote(str(self.config_path)) if self.config_path is not None else "F"
        served = (
            "they are served anyway (pins.policy: warn)"
            if self.policy == "warn"
            else "none of its tools, prompts or resource templates are served (pins.policy: block)"
        )
        log.warning(  # (approve names the server: `pin` would also take other servers' drift)
            "servers.%s has no entry in %s (a lock file written for another config?): %s; "
            "review with `dpt-launch pins diff --config %s`, then approve this server with "
            "`dpt-launch pins approve --config %s %s`, or give this config its own lock file "
            "(pins.lock_file)",
            server,
            lock,
            served,
            config,
            config,
            server,
        )

    def _report(self, finding: Finding, definition: Mapping[str, Any] | None) -> None:
        key = (finding, repr(definition))
        if key in self._reported:
            return
        self._reported.add(key)
        if finding.problem == "removed":
            log.warning(
                "servers.%s: pinned %s %r is gone from the server; `dpt-launch pins approve %s` "
                "drops it from the lock file",
                finding.server,
                WHAT[finding.kind],
                finding.name,
                finding.key,
            )
            return
        served = (
            "served anyway (pins.policy: warn)"
            if self.policy == "warn"
            else "not served (pins.policy: block)"
        )
        hint = (
            "the server must remove them"
            if finding.problem == "hidden text"
            else f"`dpt-launch pins diff` shows it, `dpt-launch pins approve {finding.key}` takes it"
        )
        log.warning("servers.%s: %s: %s; %s", finding.server, finding.line(), served, hint)
