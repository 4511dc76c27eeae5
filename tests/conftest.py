"""Shared test configuration.

Hypothesis profiles, chosen with ``HYPOTHESIS_PROFILE``:

- ``dev`` (default): quick feedback while editing.
- ``ci``: derandomized (the same examples every run) and no deadline, since CI machines are
  shared and a slow example is not a failure; ``make test`` selects it.
- ``thorough``: many examples, for a long run before a release.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=50)
settings.register_profile(
    "ci",
    max_examples=100,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
