"""Registers the test kit's counting environment for every test; keeps the tests' caches out of the user's."""

import os
import tempfile

import mas_testkit  # noqa: F401  (import registers the "counter" environment)

os.environ["VERL_MAS_CACHE"] = tempfile.mkdtemp(prefix="verl_mas_test_cache_")
