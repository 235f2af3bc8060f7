"""Per-policy resources of the AT-GRPO trainer: worker groups, LLM servers named after their policy (and the worker
that finds its own), and the copy of verl's config each policy runs with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from verl.checkpoint_engine import CheckpointEngineManager
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls,
)
from verl.workers.engine_workers import ActorRolloutRefWorker
from verl.workers.rollout.llm_server import LLMServerManager
from verl.workers.rollout.replica import get_rollout_replica_class

from verl_mas.verl_engine.config import PolicyConfig

MAS_POLICY_KEY = "mas_policy"  # in actor_rollout_ref.rollout.custom (verl's free-form slot): the worker's policy


def policy_pool_name(policy: str) -> str:
    return f"mas_{policy}_pool"


def build_policy_worker_groups(
    pools: Mapping[str, RayResourcePool],
    worker_class_of: Callable[[str], tuple[str, RayClassWithInitArgs]],
    **worker_group_kwargs: Any,
) -> dict[str, RayWorkerGroup]:
    """One worker group per policy on that policy's pool, named after the policy so Ray actor names never clash.

    Args:
        pools: policy id -> its resource pool.
        worker_class_of: policy id -> (verl role string, the worker class with its init args); the role prefixes
            the worker's methods in verl's colocated worker class, as in verl's own trainer.
        worker_group_kwargs: passed to every `RayWorkerGroup` (device_name, profiling options).
    """
    groups = {}
    for policy, pool in pools.items():
        role, worker_class = worker_class_of(policy)
        colocated = create_colocated_worker_cls(class_dict={role: worker_class})
        group = RayWorkerGroup(
            resource_pool=pool, ray_cls_with_init=colocated, name_prefix=f"mas_{policy}_", **worker_group_kwargs
        )
        groups[policy] = group.spawn(prefix_set={role})[role]
    return groups


def server_name_prefix(policy: str, rollout_name: str) -> str:
    """Ray actor-name prefix of a policy's LLM servers, e.g. `mas_tool_vllm_` (verl's own is `vllm_`)."""
    return f"mas_{policy}_{rollout_name}_"


class PolicyLLMServerManager(LLMServerManager):
    """verl's server manager whose replicas name their server actors `mas_<policy>_<rollout>_server_<rank>_<node>`.

    Replica ranks stay 0..R-1 within each policy (a hybrid replica indexes its own policy's worker group by rank);
    the policy in the name keeps two policies' servers apart, and `PolicyActorRolloutRefWorker` looks its server up
    under the same name for weight sync.
    """

    def __init__(self, config: DictConfig, *, policy: str, **kwargs: Any) -> None:
        rollout = config.actor_rollout_ref.rollout
        replica_class = get_rollout_replica_class(rollout.name, disaggregation_enabled=rollout.disaggregation.enabled)
        prefix = server_name_prefix(policy, rollout.name)

        class PolicyReplica(replica_class):
            def _get_server_name_prefix(self) -> str:
                return prefix

        self.rollout_replica_class = PolicyReplica
        super().__init__(config, **kwargs)


class PolicyActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's actor-rollout worker whose rollout adapter finds its own policy's server (see PolicyLLMServerManager).

    The policy comes from `actor_rollout_ref.rollout.custom.mas_policy`, which `policy_trainer_config` sets.
    """

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        super().init_model()
        rollout = getattr(self, "rollout", None)
        if rollout is not None:
            prefix = server_name_prefix(self.config.rollout.custom[MAS_POLICY_KEY], self.config.rollout.name)
            rollout._get_server_name_prefix = lambda: prefix


def policy_trainer_config(config: DictConfig, policy: str, settings: PolicyConfig, n_gpus_per_node: int) -> DictConfig:
    """A copy of verl's whole config in which actor_rollout_ref is this policy's (model, LoRA, GPUs)."""
    policy_config = OmegaConf.create(OmegaConf.to_container(config, resolve=True))
    with open_dict(policy_config):
        model = policy_config.actor_rollout_ref.model
        if settings.model_path:
            model.path = settings.model_path
        if settings.lora_rank:
            model.lora_rank = settings.lora_rank
        policy_config.actor_rollout_ref.rollout.n_gpus_per_node = n_gpus_per_node
        policy_config.actor_rollout_ref.rollout.custom = {
            **(policy_config.actor_rollout_ref.rollout.get("custom") or {}),
            MAS_POLICY_KEY: policy,
        }
        policy_config.trainer.n_gpus_per_node = n_gpus_per_node
    return policy_config


@dataclass
class PolicyRuntime:
    """What verl keeps once per trainer, kept once per policy."""

    config: DictConfig
    tokenizer: Any
    actor_rollout_wg: RayWorkerGroup
    ref_policy_wg: RayWorkerGroup | None
    ref_in_actor: bool
    llm_server_manager: LLMServerManager
    checkpoint_manager: CheckpointEngineManager
