"""Pinned definitions: what a person approved of each mounted server's tools, prompts and
resource templates, kept beside the config in a lock file a pull request can show.

An agent reads every tool's description and schema as instructions, so a server that changes a
definition after it was approved can steer the agent (a "rug pull": OWASP MCP Top 10 MCP03,
CVE-2025-54136). The lock file (``tools.lock``, JSON) holds, per server, each definition as
approved and the SHA-256 of its canonical JSON (RFC 8785, the ``rfc8785`` package): a changed
definition, or one that was never pinned, is not served (``policy: block``) or is served with a
warning (``policy: warn``); a pinned one that is gone is reported. Keeping the definitions, not
only their hashes, lets ``dpt-launch pins diff`` show what changed.

Hidden content is the cheap, certain part of tool poisoning: text a person reviewing the
definition cannot see (the Unicode tag block, zero-width and direction-changing characters) or
that a terminal interprets (escape sequences). :func:`hidden_characters` finds it,
:func:`shown` makes it visible.

Plain Python: the composition decides what to serve with :func:`drift`, the verbs write and
read the file.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import rfc8785

from ...exceptions import DptError

LOCK_FILE_VERSION = 1
Kind = Literal["tools", "prompts", "resourceTemplates"]
KINDS: tuple[Kind, ...] = ("tools", "prompts", "resourceTemplates")
# The fields of a definition an agent reads; a change to any of them needs approval again.
PINNED_FIELDS: dict[Kind, tuple[str, ...]] = {
    "tools": ("name", "title", "description", "inputSchema", "outputSchema", "annotations"),
    "prompts": ("name", "title", "description", "arguments"),
    "resourceTemplates": ("name", "title", "uriTemplate", "description", "mimeType"),
}

# Characters a reader cannot see or that change how text reads: the tag block, zero-width
# characters, direction marks, embeddings, overrides and isolates; and C0/C1 controls but tab
# and newline, and a carriage return but before a newline (terminal escape sequences start
# with ESC, U+001B, or CSI, U+009B; a lone carriage return can hide a line behind another).
_HIDDEN = re.compile(
    "[\U000e0000-\U000e007f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\u061c"
    "\u180e\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)"
)


class PinError(DptError):
    """The lock file cannot be read or written; the message names the file and the fix."""


def pinned_part(kind: Kind, definition: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of *definition* that are pinned (absent ones left out)."""
    return {key: definition[key] for key in PINNED_FIELDS[kind] if definition.get(key) is not None}


def definition_hash(kind: Kind, definition: Mapping[str, Any]) -> str:
    """SHA-256 of the pinned fields' canonical JSON (RFC 8785), as hex."""
    return hashlib.sha256(rfc8785.dumps(pinned_part(kind, definition))).hexdigest()


def hidden_characters(definition: Any) -> list[str]:
    """Each hidden or control character in the strings of *definition* (keys and values, at any
    depth), as ``U+XXXX``, in order of first appearance."""
    found: dict[str, None] = {}
    for text in _strings(definition):
        for match in _HIDDEN.finditer(text):
            found.setdefault(f"U+{ord(match.group()):04X}", None)
    return list(found)


def shown(text: str) -> str:
    """*text* with every hidden or control character made visible (``\\u200b``, ``\\x1b``)."""
    return _HIDDEN.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


@dataclass
class LockFile:
    """The approved definitions: server -> kind -> own name -> definition (pinned fields)."""

    servers: dict[str, dict[Kind, dict[str, dict[str, Any]]]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> LockFile:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PinError(f"{path}: no lock file; write one with dpt-launch pin") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise PinError(
                f"{path}: cannot be read as a lock file ({exc}); write it again with dpt-launch pin"
            ) from None
        if not isinstance(data, dict) or data.get("version") != LOCK_FILE_VERSION:
            raise PinError(
                f"{path}: not a version {LOCK_FILE_VERSION} lock file; write it again "
                "with dpt-launch pin"
            )
        servers: dict[str, dict[Kind, dict[str, dict[str, Any]]]] = {}
        for server, entries in (data.get("servers") or {}).items():
            servers[server] = {}
            for kind in KINDS:
                items = (entries or {}).get(kind) or {}
                servers[server][kind] = {
                    name: dict(item.get("definition") or {}) for name, item in items.items()
                }
                for name, item in items.items():
                    if item.get("sha256") != definition_hash(kind, servers[server][kind][name]):
                        raise PinError(
                            f"{path}: the hash of {server}.{name} does not match its definition "
                            "(edited by hand?); approve it again with dpt-launch pins approve"
                        )
        return cls(servers)

    def write(self, path: Path) -> None:
        """Write the file whole (a temp file, then ``os.replace``): a reader never sees half."""
        data = {
            "version": LOCK_FILE_VERSION,
            "about": "Tool definitions approved for dpt-launch (dpt-launch pin / pins approve); "
            "review changes to this file like code.",
            "servers": {
                server: {
                    kind: {
                        name: {"sha256": definition_hash(kind, item), "definition": item}
                        for name, item in sorted(kinds.get(kind, {}).items())
                    }
                    for kind in KINDS
                    if kinds.get(kind)
                }
                for server, kinds in sorted(self.servers.items())
            },
        }
        text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise

    def approve(self, served: Served, only: str | None = None) -> list[str]:
        """Take the served definitions (all, or of ``SERVER`` or ``SERVER.NAME``): what changed."""
        taken: list[str] = []
        for server, kinds in served.items():
            for kind in KINDS:
                for name, definition in kinds.get(kind, {}).items():
                    if only is not None and only not in (server, f"{server}.{name}"):
                        continue
                    pinned = self.servers.setdefault(server, {}).setdefault(kind, {})
                    part = pinned_part(kind, definition)
                    if pinned.get(name) != part:
                        pinned[name] = part
                        taken.append(f"{server}.{name}")
            # what the server no longer has is dropped (all of it, or the one named)
            for kind in KINDS:
                pinned = self.servers.get(server, {}).get(kind, {})
                for name in list(pinned):
                    if name in kinds.get(kind, {}):
                        continue
                    if only is None or only in (server, f"{server}.{name}"):
                        del pinned[name]
                        taken.append(f"{server}.{name} (removed)")
        return taken


# server -> kind -> own name -> definition (as the server lists it)
Served = Mapping[str, Mapping[Kind, Mapping[str, Mapping[str, Any]]]]


@dataclass(frozen=True)
class Finding:
    """One definition that differs from its pin, or carries hidden text."""

    server: str
    kind: Kind
    name: str
    problem: Literal["changed", "not pinned", "removed", "hidden text"]
    detail: str = ""

    @property
    def key(self) -> str:
        return f"{self.server}.{self.name}"

    def line(self) -> str:
        what = {"tools": "tool", "prompts": "prompt", "resourceTemplates": "resource template"}
        extra = f": {self.detail}" if self.detail else ""
        return f"{what[self.kind]} {self.key} {self.problem}{extra}"


def drift(
    pins: LockFile | None, server: str, served: Mapping[Kind, Mapping[str, Any]]
) -> list[Finding]:
    """What of *server*'s served definitions differs from *pins* (None: nothing is pinned, only
    hidden text counts), in a stable order."""
    found: list[Finding] = []
    pinned = pins.servers.get(server, {}) if pins is not None else None
    for kind in KINDS:
        have = served.get(kind, {})
        for name in sorted(have):
            definition = have[name]
            hidden = hidden_characters(pinned_part(kind, definition))
            if hidden:
                found.append(Finding(server, kind, name, "hidden text", ", ".join(hidden)))
            if pinned is None:
                continue
            approved = pinned.get(kind, {}).get(name)
            if approved is None:
                found.append(Finding(server, kind, name, "not pinned"))
            elif approved != pinned_part(kind, definition):
                found.append(Finding(server, kind, name, "changed"))
        if pinned is not None:
            for name in sorted(set(pinned.get(kind, {})) - set(have)):
                found.append(Finding(server, kind, name, "removed"))
    return found


def definition_diff(
    kind: Kind, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, label: str
) -> str:
    """A unified diff of two definitions' pinned fields, as indented JSON, hidden text shown."""

    def lines(definition: Mapping[str, Any] | None) -> list[str]:
        if definition is None:
            return []
        text = json.dumps(
            pinned_part(kind, definition), indent=2, sort_keys=True, ensure_ascii=False
        )
        return [shown(line) + "\n" for line in text.splitlines()]

    return "".join(
        difflib.unified_diff(lines(before), lines(after), f"{label} (pinned)", f"{label} (served)")
    )
