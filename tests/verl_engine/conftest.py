"""Shared fixtures of the verl-engine tests: verl's real TransferQueue on a local Ray instance."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf


@pytest.fixture(scope="session")
def transfer_queue():
    """verl's real TransferQueue (controller and one storage unit as Ray actors), as the trainer uses it."""
    import ray
    import transfer_queue as tq

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield tq
    tq.close()
    ray.shutdown()
