"""Hypothesis profiles: `dev` (default, quick), `ci` (what CI runs), `thorough` (a campaign).

Choose one with SEQBALANCE_HYPOTHESIS_PROFILE=thorough pytest ...
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
    print_blob=True,
)
settings.register_profile(
    "thorough", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(
    os.environ.get("SEQBALANCE_HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")
)
