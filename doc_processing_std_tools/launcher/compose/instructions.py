"""The composed server's instructions: mounted servers' own would be dropped, so they are merged."""

from __future__ import annotations

from .mount import Mount

DEFAULT_INSTRUCTIONS = (
    "Standard tools composed by dpt-launch. Each section below describes one mounted server."
)


def merge_instructions(own: str | None, mounts: list[Mount]) -> str:
    """The composed instructions: the config's own text, then each mounted server's."""
    parts = [own or DEFAULT_INSTRUCTIONS]
    for mount in mounts:
        text = (mount.server.instructions or "").strip()
        if text:
            prefix = (
                f" (tools prefixed '{mount.entry.namespace}_')" if mount.entry.namespace else ""
            )
            parts.append(f"## {mount.name}{prefix}\n{text}")
    return "\n\n".join(parts)
