"""Registers the test kit's counting environment for every test; keeps the tests' caches out of the user's; under
pytest-xdist, starts the verl CPU-stack launches first, one per worker (xdist_schedule.py)."""

import atexit
import os
import shutil
import tempfile

import pytest
import xdist_schedule

import mas_testkit  # noqa: F401  (import registers the test environments "counter" and "say_digit")

# One cache per test process, removed when it ends: the real model's conversion writes 0.5 GB into it.
os.environ["VERL_MAS_CACHE"] = tempfile.mkdtemp(prefix="verl_mas_test_cache_")
atexit.register(shutil.rmtree, os.environ["VERL_MAS_CACHE"], ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    xdist_schedule.stack_first(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    return xdist_schedule.make_scheduler(config, log)
