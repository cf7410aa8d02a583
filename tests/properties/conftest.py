"""Hypothesis profiles for the property tests; pick one with ``HYPOTHESIS_PROFILE`` (default ``ci``).

- ``ci``: deterministic (derandomized, no example database), no deadline (CI machines are slow and
  noisy), enough examples per property to keep the whole folder under a minute on 2 cores.
- ``dev``: randomised and ten times the examples, for hunting bugs locally
  (``HYPOTHESIS_PROFILE=dev pytest tests/properties``).
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    deadline=None,
    max_examples=40,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=400, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
