"""Registers the test kit's counting environment for every test."""

import mas_testkit  # noqa: F401  (import registers the "counter" environment)
