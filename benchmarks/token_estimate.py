"""How close ``dpt-launch tools --budget``'s token estimate (compact JSON characters / 4) comes
to a real tokenizer, on the tool definitions of the shipped config plus a 150-tool server.

The reference is OpenAI's ``o200k_base`` and ``cl100k_base`` from ``bpe-openai``, which
carries its BPE tables inside the package (tiktoken downloads them on first use, which fails
offline). No Claude tokenizer is available offline, so Claude's counts are not measured.

Run: ``python benchmarks/token_estimate.py`` (``pip install '.[bench]'`` for bpe-openai).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


async def _definitions() -> list[dict[str, Any]]:
    from doc_processing_std_tools.launcher.cli.budget import definition, listed
    from doc_processing_std_tools.launcher.compose.composition import compose
    from doc_processing_std_tools.launcher.config.schema import load_config

    composition = await compose(load_config(REPO / "configs/tools.yaml"))
    try:
        shipped = [definition(tool) for _, tool in listed(composition)]
    finally:
        await composition.aclose()
    sys.path.insert(0, str(REPO / "tests"))
    import many_tools_server

    big = [
        definition(t.to_mcp_tool().model_dump(by_alias=True, exclude_none=True, mode="json"))
        for t in await many_tools_server.server.list_tools()
    ]
    return shipped + big


def figures(quick: bool = False) -> dict[str, float]:
    import bpe_openai

    from doc_processing_std_tools.launcher.cli.budget import estimate_tokens

    definitions = asyncio.run(_definitions())
    estimated = [estimate_tokens(d) for d in definitions]
    out: dict[str, float] = {
        "tool definitions (count)": len(definitions),
        "estimated, characters / 4 (tokens)": sum(estimated),
    }
    for name in ("o200k_base", "cl100k_base"):
        encoding = bpe_openai.get_encoding(name)
        counted = [
            len(encoding.encode(json.dumps(d, separators=(",", ":"), ensure_ascii=False)))
            for d in definitions
        ]
        errors = [(e - c) / c for e, c in zip(estimated, counted, strict=True)]
        out[f"{name} (tokens)"] = sum(counted)
        out[f"estimate over {name}, in total (%)"] = (
            100 * (sum(estimated) - sum(counted)) / sum(counted)
        )
        out[f"estimate over {name}, the least per tool (%)"] = 100 * min(errors)
        out[f"estimate over {name}, the most per tool (%)"] = 100 * max(errors)
    return out


if __name__ == "__main__":
    for key, value in figures().items():
        print(f"{key}: {value:,.1f}")
