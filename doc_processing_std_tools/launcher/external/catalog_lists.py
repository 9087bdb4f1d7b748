"""A client's lists answered from the catalog while its own upstream sessions open.

With ``sessions: per_client`` each HTTP client has its own session of a server (its own child,
initialized with the client's own ``initialize``). Its first ``tools/list`` need not wait for
that child to start: the launcher's own session, which built the catalog, answers it
(:meth:`.Supervisor.own_session` reads :data:`CATALOG_LIST`, set by the composition's
middleware for list requests), and once the client's own session is up the two lists are
compared (:func:`listed_alike`): the client is told ``list_changed`` when they differ, as for a
server that came up late. Its calls always wait for its own session.

Kept apart from :mod:`.per_client`, which imports fastmcp's client (0.3-0.5 s with its auth
module, ``python -X importtime``): the composition's middleware imports this module, and a
launcher with no external server never imports fastmcp's client.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

# The list request being served (its method), set by the composition's middleware: while the
# client's own session is still opening, the launcher's own session answers it (the catalog),
# and the client is told list_changed if its own session then lists differently.
CATALOG_LIST: ContextVar[str | None] = ContextVar("dpt_catalog_list", default=None)

# a list method -> the client's method that lists it, and the notification of its change
LISTS = {
    "tools/list": ("list_tools", "notifications/tools/list_changed"),
    "prompts/list": ("list_prompts", "notifications/prompts/list_changed"),
    "resources/list": ("list_resources", "notifications/resources/list_changed"),
    "resources/templates/list": (
        "list_resource_templates",
        "notifications/resources/list_changed",
    ),
}


async def listed_alike(own: Any, catalog: Any, method: str) -> bool:
    """Whether the client's own session (*own*'s client) lists *method* as the launcher's own
    (*catalog*, which answered the client's list while its own session opened) does."""
    lister = LISTS[method][0]
    mine = await getattr(own, lister)()
    theirs = await getattr(catalog, lister)()
    return [item.model_dump() for item in mine] == [item.model_dump() for item in theirs]
