"""Hypothesis profiles of the property-based tests: ``ci`` (the default run) and ``soak``
(``HYPOTHESIS_PROFILE=soak``, many more examples)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "soak", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
