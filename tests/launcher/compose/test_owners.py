"""Which mount exposes each name (launcher/compose/owners.py): one table per mounts list."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from doc_processing_std_tools.launcher.compose.owners import Owners, OwnersCache


def mount(name: str, *tools: str, prompts: tuple[str, ...] = (), external: bool = False) -> Any:
    return SimpleNamespace(
        name=name,
        tools=[SimpleNamespace(name=t) for t in tools],
        prompts=prompts,
        resources=(),
        supervisor=object() if external else None,
        entry=SimpleNamespace(namespace=name),
    )


def test_the_owners_are_built_once_per_mounts_list_and_again_when_it_is_swapped() -> None:
    cache = OwnersCache()
    mounts = [mount("a", "a_one", prompts=("a_hi",)), mount("b", "b_two", external=True)]
    owners = cache.of(mounts)
    assert cache.of(mounts) is owners
    assert owners.tools == {"a_one": "a", "b_two": "b"}
    assert owners.prompt_mounts["a_hi"] is mounts[0] and owners.named["b"] is mounts[1]
    swapped = [*mounts, mount("c", "c_three")]  # (a refresh or reload assigns a new list)
    assert cache.of(swapped) is not owners and cache.of(swapped).tools["c_three"] == "c"


def test_a_name_two_mounts_list_stays_the_firsts() -> None:
    owners = Owners([mount("a", "x", prompts=("p",)), mount("b", "x", prompts=("p",))])
    assert owners.tools["x"] == "a" and owners.prompts["p"] == "a"
