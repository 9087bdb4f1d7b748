"""An MCP server run as its own process with many tools, like a big public server.

``python many_tools_server.py``: 150 tools, one per verb and kind of GitHub object
(``list_repository``, ``export_dependabot_alert``, ...), each with a description and
parameters of the kind public servers have, plus ``secret_wipe_everything``, which the
tests' configs leave out with a server filter.
"""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP
from fastmcp.tools import Tool

VERBS = {
    "list": "List every {what} the caller can see, newest first, a page at a time.",
    "get": "Get one {what} by its number or name, with all of its fields.",
    "create": "Create a new {what} with the given title and body.",
    "update": "Update the fields of an existing {what}; fields left out keep their value.",
    "delete": "Delete a {what} for good; this cannot be undone.",
    "search": "Search {what}s by text, author, state or label, using GitHub's search syntax.",
    "archive": "Archive a {what} so that it is read-only but still listed.",
    "export": "Export every {what} as CSV, for a report or a spreadsheet.",
    "comment_on": "Add a Markdown comment to a {what}, visible to everyone with access.",
    "label": "Add labels to a {what}, creating the labels that do not exist yet.",
}
KINDS = {
    "repository": "repository",
    "issue": "issue",
    "pull_request": "pull request",
    "branch": "branch",
    "release": "release",
    "workflow_run": "GitHub Actions workflow run",
    "deployment": "deployment to an environment",
    "discussion": "discussion thread",
    "project_item": "project board item",
    "security_advisory": "repository security advisory",
    "code_scanning_alert": "code scanning alert",
    "dependabot_alert": "Dependabot vulnerability alert",
    "gist": "gist",
    "team_membership": "team membership",
    "organization_webhook": "organization webhook",
}
server = FastMCP("many")


def _make(name: str, description: str) -> Tool:
    def run(owner: str, repo: str, query: str = "", page: int = 1) -> dict[str, Any]:
        return {"tool": name, "owner": owner, "repo": repo, "query": query, "page": page}

    return Tool.from_function(
        run,
        name=name,
        description=description,
        annotations={"readOnlyHint": True},
    )


for verb, text in VERBS.items():
    for kind, what in KINDS.items():
        server.add_tool(_make(f"{verb}_{kind}", text.format(what=what)))
server.add_tool(_make("secret_wipe_everything", "Wipe every repository of the organization."))

if __name__ == "__main__":
    server.run(show_banner=False)
