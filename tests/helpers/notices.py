"""A client's ``message_handler`` that records the notifications it receives, to wait on them."""

from __future__ import annotations

import anyio

CHANGED = "notifications/tools/list_changed"


class Notices:
    """The notifications the client received, by method."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    async def __call__(self, message: object) -> None:
        method = getattr(getattr(message, "root", message), "method", None)
        if method:
            self.methods.append(method)

    async def wait_for(self, method: str, count: int = 1) -> None:
        with anyio.fail_after(30):
            while self.methods.count(method) < count:
                await anyio.sleep(0.05)
