"""The launcher's exception root: every error the launcher raises of its own derives from
:class:`LauncherError`, and so from the package's :class:`~doc_processing_std_tools.exceptions.DptError`.
A leaf any layer of the launcher may import."""

from __future__ import annotations

from ..exceptions import DptError


class LauncherError(DptError):
    """A failure of the launcher itself: its config, composing the servers, serving them."""
