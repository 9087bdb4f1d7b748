"""A server as ``FastMCP.mount`` would add it, with the launcher's rules around its tools, and
showing only the names the composition lets it own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastmcp import FastMCP
from fastmcp.server.providers import Provider
from fastmcp.server.providers.aggregate import AggregateProvider
from fastmcp.server.providers.fastmcp_provider import FastMCPProvider
from fastmcp.server.transforms import Namespace, Transform

from ...seams.fastmcp_server import behaves_as_default
from ..calls.policed_tools import MountRules, PolicedListing


def mounted_provider(server: FastMCP, rules: MountRules) -> Provider:
    """*server* as ``FastMCP.mount`` would add it, its tools policed by *rules*.

    A server with settings of its own is mounted whole (its middleware, error masking and
    lifespan all apply, exactly as when it runs alone); one with none has its providers served
    directly (:func:`~doc_processing_std_tools.seams.fastmcp_server.behaves_as_default`): one
    dispatch layer fewer per call (``benchmarks/run.py``).
    """
    inner: Provider = (
        AggregateProvider(list(server.providers))
        if behaves_as_default(server)
        else FastMCPProvider(server)
    )
    provider: Provider = inner.wrap_transform(PolicedListing(rules))
    if rules.namespace:
        provider = provider.wrap_transform(Namespace(rules.namespace))
    return provider


class ShownOnly(Transform):
    """What a provider lists and finds, limited to what *allows* ``(kind, key)`` lets through:
    kind ``tool`` (key: the exposed name), ``prompt`` (its name) or ``resource`` (a URI or URI
    template), so a name another server owns can neither be listed nor called here. (A look-up
    asks every server: only one that has the name may be told it is hidden.)"""

    def __init__(self, allows: Callable[[str, str], bool]) -> None:
        self._allows = allows

    async def list_tools(self, tools: Sequence[Any]) -> Sequence[Any]:
        return [tool for tool in tools if self._allows("tool", tool.name)]

    async def get_tool(self, name: str, call_next: Any, *, version: Any = None) -> Any:
        found = await call_next(name, version=version)
        return found if found is not None and self._allows("tool", name) else None

    async def list_prompts(self, prompts: Sequence[Any]) -> Sequence[Any]:
        return [prompt for prompt in prompts if self._allows("prompt", prompt.name)]

    async def get_prompt(self, name: str, call_next: Any, *, version: Any = None) -> Any:
        found = await call_next(name, version=version)
        return found if found is not None and self._allows("prompt", name) else None

    async def list_resources(self, resources: Sequence[Any]) -> Sequence[Any]:
        return [item for item in resources if self._allows("resource", str(item.uri))]

    async def get_resource(self, uri: str, call_next: Any, *, version: Any = None) -> Any:
        found = await call_next(uri, version=version)
        if found is None or not self._allows("resource", str(found.uri)):
            return None
        return found

    async def list_resource_templates(self, templates: Sequence[Any]) -> Sequence[Any]:
        return [item for item in templates if self._allows("resource", item.uri_template)]

    async def get_resource_template(self, uri: str, call_next: Any, *, version: Any = None) -> Any:
        found = await call_next(uri, version=version)
        if found is None or not self._allows("resource", found.uri_template):
            return None
        return found


def exposed_only(provider: Provider, allows: Callable[[str, str], bool]) -> Provider:
    """*provider* showing only what *allows* lets through (:class:`ShownOnly`)."""
    return provider.wrap_transform(ShownOnly(allows))
