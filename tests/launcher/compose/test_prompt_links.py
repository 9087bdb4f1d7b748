"""Resources an external server's prompt embeds, under the URIs the launcher exposes
(launcher/compose/prompt_links.py); an in-process server's prompts are left as they are."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from doc_processing_std_tools.launcher.compose.prompt_links import PromptLinks
from helpers.compositions import Composed

EMBEDDED = {"type": "resource", "resource": {"uri": "demo://resource/text/3", "text": "t"}}


def mount(namespace: str, prompt: str, *, external: bool) -> Any:
    return SimpleNamespace(
        supervisor=object() if external else None,
        prompts=(prompt,),
        entry=SimpleNamespace(namespace=namespace),
    )


async def get(middleware: PromptLinks, name: str) -> Any:
    async def served(ctx: Any) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": EMBEDDED}]}

    ctx = SimpleNamespace(method="prompts/get", params={"name": name})
    return await middleware(ctx, served)


async def test_an_external_prompts_embedded_resources_are_named_as_exposed() -> None:
    links = PromptLinks(
        Composed(
            mounts=[mount("ev", "ev_show", external=True), mount("own", "own_show", external=False)]
        )
    )
    shown = await get(links, "ev_show")
    assert shown["messages"][0]["content"]["resource"]["uri"] == "demo://ev/resource/text/3"
    kept = await get(links, "own_show")
    assert kept["messages"][0]["content"] == EMBEDDED
