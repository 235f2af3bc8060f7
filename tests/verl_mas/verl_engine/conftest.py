"""Shared fixtures of the verl-engine tests: one local Ray instance per session, and verl's real TransferQueue on it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

TESTKIT_DIR = Path(__file__).resolve().parents[2] / "testkit"


@pytest.fixture(scope="session")
def ray_session():
    """Ray on logical CPUs; its workers can import the test kit (the fake worker classes)."""
    import ray

    path = os.pathsep.join([str(TESTKIT_DIR), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def transfer_queue(ray_session):
    """verl's real TransferQueue (controller and one storage unit as Ray actors), as the trainer uses it."""
    import transfer_queue as tq

    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield tq
    tq.close()
