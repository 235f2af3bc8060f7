"""Building a run's policies: the device they run on."""

from __future__ import annotations

import pytest
import torch

from verl_mas.local.policies import resolve_device


def test_device_names_resolve_and_cuda_without_a_gpu_is_refused(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="torch sees no CUDA device"):
        resolve_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="sees 2 CUDA device"):
        resolve_device("cuda:2")
