"""The one root of the exceptions this package raises on purpose.

Every error class of the package derives from :class:`DptError` (directly, or through a
domain root such as a store's or the launcher's), so a caller can catch what this package
means to raise without catching a library's or Python's own failures.
"""

from __future__ import annotations


class DptError(Exception):
    """An error this package raised on purpose, with a message meant for a person."""
