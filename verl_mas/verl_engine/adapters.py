"""One base model with one LoRA adapter per role in one actor worker group (`mas.lora_per_role`): verl's training
engine holding every role's adapter beside verl's own, and the worker that runs each call under one adapter and
ships every adapter to the server (`adapter_serving.py`).

The engine is verl's registered FSDP engine with the role adapters added before FSDP wraps the model, so that they are
sharded, checkpointed and optimised as verl's own adapter is; every role adapter stays trainable, and only the active
one takes part in a forward pass, so an update gives gradients to that adapter alone (the optimizer skips parameters
without a gradient: no step, no moment, no weight decay for the others) and the frozen base never changes.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Sequence
from typing import Any

import torch
from omegaconf import DictConfig, open_dict
from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.single_controller.ray import ResourcePoolManager
from verl.trainer.ppo.utils import Role
from verl.utils.model import convert_weight_keys

from verl_mas.verl_engine.config import PolicyConfig
from verl_mas.verl_engine.placement import REWARD_POOL
from verl_mas.verl_engine.policies import (
    ADAPTERS_KEY,
    PolicyActorRolloutRefWorker,
    policy_pool_name,
    policy_trainer_config,
)

ADAPTER_GROUP = "adapters"  # the one worker group's (and server's) name where Ray actor names carry a policy
VERL_ADAPTER = "default"  # the adapter verl's engine builds: kept (verl's weight sync reads its config), never active
LANGUAGE_MODEL = "language_model"


def adapter_pool_manager(config: DictConfig) -> ResourcePoolManager:
    """The resource pools of a run of adapters: one pool with every GPU of `trainer.nnodes` nodes for the one worker
    group, plus verl's reward pool when the reward model has its own."""
    spec = {policy_pool_name(ADAPTER_GROUP): [config.trainer.n_gpus_per_node] * config.trainer.nnodes}
    reward_model = config.reward.reward_model
    if reward_model.enable_resource_pool:
        spec[REWARD_POOL] = [reward_model.n_gpus_per_node] * reward_model.nnodes
    return ResourcePoolManager(
        resource_pool_spec=spec, mapping={Role.RewardModel: REWARD_POOL} if REWARD_POOL in spec else {}
    )


def adapter_trainer_config(
    config: DictConfig, adapters: Sequence[str], n_gpus_per_node: int, timeline: str | None = None
) -> DictConfig:
    """The config of the one worker group that holds `adapters` (one per policy) on `actor_rollout_ref.model`: verl's
    whole config with the group's GPUs, and the adapter names in `actor_rollout_ref.rollout.custom.mas_adapters`."""
    group_config = policy_trainer_config(config, ADAPTER_GROUP, PolicyConfig(), n_gpus_per_node, timeline=timeline)
    with open_dict(group_config):
        group_config.actor_rollout_ref.rollout.custom[ADAPTERS_KEY] = list(adapters)
    return group_config


def add_role_adapters(peft_model: Any, names: Sequence[str]) -> None:
    """Add one adapter per name to `peft_model` with the config of verl's adapter (rank, alpha, target modules), in
    the dtype of the base weights as verl casts its own; make them trainable and the first one active."""
    config = peft_model.peft_config[VERL_ADAPTER]
    for name in names:
        peft_model.add_adapter(name, copy.deepcopy(config))
    base_dtype = next(p.dtype for n, p in peft_model.named_parameters() if "lora_" not in n)
    for param in adapter_parameters(peft_model, names):
        param.data = param.data.to(base_dtype)
    activate(peft_model, names[0], names)


def adapter_parameters(peft_model: Any, names: Sequence[str]) -> list[torch.nn.Parameter]:
    """The parameters of the named adapters (peft names them `...lora_A.<adapter>.weight`, `...lora_B.<adapter>...`)."""
    pattern = re.compile(rf"\.lora_\w+?\.({'|'.join(re.escape(name) for name in names)})(\.|$)")
    return [p for n, p in peft_model.named_parameters() if pattern.search(n)]


def activate(peft_model: Any, name: str, names: Sequence[str]) -> None:
    """Make `name` the adapter every forward pass uses. peft's `set_adapter` also freezes the other adapters; they
    are made trainable again, so that what FSDP and the optimizer see never changes between calls."""
    peft_model.set_adapter(name)
    for param in adapter_parameters(peft_model, names):
        param.requires_grad_(True)


def local(param: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a parameter (FSDP2 holds DTensors), detached."""
    return (param.to_local() if hasattr(param, "to_local") else param).detach()


def adapter_state(peft_model: Any, name: str) -> dict[str, torch.Tensor]:
    """The named adapter's weights (full tensors on the CPU) under the names verl's weight sync gives its adapter."""
    from peft.utils.save_and_load import get_peft_model_state_dict

    state = get_peft_model_state_dict(peft_model, adapter_name=name)
    full = {
        key: (value.full_tensor() if hasattr(value, "full_tensor") else value).detach().cpu()
        for key, value in state.items()
    }
    return convert_weight_keys(full, peft_model)


def register_adapter_engine(names: Sequence[str], strategy: str) -> type:
    """Register, for this process's device and vendor, a subclass of the engine verl would build for `strategy` that
    adds `names`' adapters before FSDP wraps the model; verl's registry prefers a vendor's engine over the device's,
    so the worker that calls this (before it builds its engine) gets it. Returns the class.

    Raises:
        RuntimeError: verl already registers an engine for this vendor, which this cannot stand in for.
    """
    from verl.utils.device import get_device_name, get_vendor
    from verl.workers.engine import EngineRegistry

    base = EngineRegistry.get_engine_cls(LANGUAGE_MODEL, strategy)
    if getattr(base, "mas_adapters", None) == tuple(names):
        return base
    device = os.getenv("VERL_ENGINE_DEVICE") or get_device_name()
    vendor = os.getenv("VERL_ENGINE_VENDOR") or get_vendor()
    if (device, vendor) in EngineRegistry._engines[LANGUAGE_MODEL][strategy]:
        raise RuntimeError(
            f"mas.lora_per_role: verl registers its own {strategy} engine for ({device}, {vendor}); the adapters' "
            "engine cannot take its place"
        )

    class AdapterEngine(base):
        mas_adapters = tuple(names)

        def _build_lora_module(self, module):
            module = super()._build_lora_module(module)
            add_role_adapters(module, self.mas_adapters)
            return module

    EngineRegistry.register(model_type=LANGUAGE_MODEL, backend=strategy, device=device, vendor=vendor)(AdapterEngine)
    return AdapterEngine


class AdapterActorRolloutRefWorker(PolicyActorRolloutRefWorker):
    """The policy worker of `mas.lora_per_role`: one base model with one adapter per role.

    `set_adapter(name)` picks the adapter its next calls run under (old log-probs, the update; the reference
    log-probs run with every adapter off, as verl runs a LoRA policy's reference); `update_weights` ships verl's sync
    and then every role adapter, each under its own name (`adapter_serving.AdapterWorkerExtension` loads it).
    The adapter names come from `actor_rollout_ref.rollout.custom.mas_adapters`.
    """

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        self.adapter_names = tuple(self.config.rollout.custom[ADAPTERS_KEY])
        register_adapter_engine(self.adapter_names, self.config.actor.strategy)
        super().init_model()

    def _peft_model(self) -> Any:
        module = self.actor.engine.module
        return getattr(module, "_fsdp_wrapped_module", module)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def set_adapter(self, name: str) -> None:
        if name not in self.adapter_names:
            raise ValueError(f"adapter {name!r}: this worker holds {list(self.adapter_names)}")
        activate(self._peft_model(), name, self.adapter_names)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"), blocking=False)
    def update_actor(self, data):
        """verl's update under the active adapter; raises if it changed any other adapter (their copies are kept
        during the update: one adapter's parameters per other role)."""
        peft_model = self._peft_model()
        active = peft_model.active_adapter
        others = [name for name in self.adapter_names if name != active]
        before = [local(p).clone() for p in adapter_parameters(peft_model, others)]
        output = super().update_actor(data)
        after = [local(p) for p in adapter_parameters(peft_model, others)]
        if any(not torch.equal(a, b) for a, b in zip(before, after, strict=True)):
            raise RuntimeError(f"the update under adapter {active!r} changed the weights of adapter(s) {others}")
        return output

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def update_weights(self, global_steps: int = None, mode: str = "auto"):
        from verl_mas.verl_engine.adapter_serving import ADAPTER_ID_FIELD, ADAPTER_NAME_FIELD, adapter_ids  # vLLM's

        await super().update_weights(global_steps=global_steps, mode=mode)
        with self._timed("update_adapters"):
            peft_model = self._peft_model()
            ids = adapter_ids(self.adapter_names)
            for name in self.adapter_names:
                config = peft_model.peft_config[name].to_dict()
                config.update({ADAPTER_NAME_FIELD: name, ADAPTER_ID_FIELD: ids[name]})
                state = adapter_state(peft_model, name)
                await self.rollout.update_weights(
                    iter(state.items()), peft_config=config, base_sync_done=True, global_steps=global_steps
                )
