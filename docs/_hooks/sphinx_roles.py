"""Griffe extension: the package's reST roles (``:class:`~x.Y```) as Markdown code on the API pages.

The docstrings are read by people in editors and by the API reference (mkdocstrings,
Google style, Markdown); a role such as ``:func:`~doc_processing_std_tools.locking.exclusive```
would otherwise be shown as written. It becomes ``exclusive`` in code: the last part with
``~``, else the target without its leading dots, as Sphinx would show it.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const):`(~?)\.*([^`]+)`")


def plain(text: str) -> str:
    """*text* with every role replaced by a code span of what Sphinx would show."""
    return ROLE.sub(lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles in every docstring of a loaded package."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._rewrite(pkg)

    def _rewrite(self, obj: griffe.Object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
        for member in obj.members.values():
            if not member.is_alias:
                self._rewrite(member)
