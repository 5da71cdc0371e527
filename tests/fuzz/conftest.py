"""Hypothesis profiles for the fuzz suite.

ci (default): a small fixed budget per entry point, derandomized, so CI stays within minutes.
long: many more examples with a random seed (OXILLAMA_FUZZ_PROFILE=long), for a hunt by hand;
bench/fuzz.py is the tool for real long runs (each case in a child process).
"""
import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))
settings.register_profile("ci", max_examples=100, derandomize=True, **_COMMON)
settings.register_profile("long", max_examples=5000, derandomize=False, **_COMMON)
PROFILE = os.environ.get("OXILLAMA_FUZZ_PROFILE", "ci")
