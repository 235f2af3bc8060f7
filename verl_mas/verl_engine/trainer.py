"""`AtGrpoTrainer`: verl 0.9.1's V1 sync PPO trainer with AT-GRPO advantages and one worker group per policy."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
import torch
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf, open_dict
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.checkpoint_engine import CheckpointEngineManager
from verl.experimental.reward_loop import RewardLoopManager
from verl.protocol import DataProto
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    ResourcePoolManager,
    create_colocated_worker_cls,
)
from verl.trainer.ppo.ray_trainer import apply_kl_penalty
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.trainer.ppo.utils import Role, need_critic, need_reference_policy, need_teacher_policy
from verl.trainer.ppo.v1 import PPOTrainerSync
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.debug import marked_timer
from verl.workers.engine_workers import ActorRolloutRefWorker
from verl.workers.rollout.llm_server import LLMServerManager
from verl.workers.rollout.replica import get_rollout_replica_class
from verl.workers.utils.padding import response_to_nested

from verl_mas.advantage import group_ids, registered_estimator
from verl_mas.router import PolicyRouter
from verl_mas.verl_engine.agent_loop import mas_config_of
from verl_mas.verl_engine.config import MasConfig, MasConfigError, PolicyConfig
from verl_mas.verl_engine.routing import PolicyRoutingClient

logger = logging.getLogger(__name__)

MAS_POLICY_KEY = "mas_policy"  # in actor_rollout_ref.rollout.custom (verl's free-form slot): the worker's policy


# ------------------------------------------------------------------ the advantage step (pure, CPU-testable)


@dataclass(frozen=True)
class SampleTags:
    """Per-row tags the agent loop wrote into extra_fields, as arrays; padding rows carry no sample."""

    task_uid: np.ndarray  # [n] object
    role: np.ndarray  # [n] object
    turn: np.ndarray  # [n] int64
    policy: np.ndarray  # [n] object
    mixed_reward: np.ndarray  # [n] float64
    env_error: np.ndarray  # [n] bool
    valid: np.ndarray  # [n] bool
    padding: np.ndarray  # [n] bool

    @classmethod
    def from_rows(cls, extra_fields: Sequence[Any], padding: Sequence[bool]) -> SampleTags:
        """Read the tags of every row.

        Raises:
            ValueError: a real row lacks a tag (it was not produced by the `mas_agent` loop), naming row and key.
        """
        if len(extra_fields) != len(padding):
            raise ValueError(f"at_grpo step: {len(extra_fields)} rows of extra_fields for {len(padding)} tags")
        keys = ("task_uid", "role", "turn", "policy", "mixed_reward")
        columns: dict[str, list] = {key: [] for key in (*keys, "env_error", "valid")}
        for row, (fields, is_padding) in enumerate(zip(extra_fields, padding, strict=True)):
            fields = fields if isinstance(fields, Mapping) else {}
            missing = [key for key in keys if fields.get(key) is None]
            if missing and not is_padding:
                raise ValueError(
                    f"at_grpo step: row {row} has no extra_fields {missing}; was it produced by the mas_agent loop?"
                )
            for key in keys:
                columns[key].append(fields.get(key, ""))
            columns["env_error"].append(bool(fields.get("env_error", False)))
            columns["valid"].append(bool(fields.get("valid", True)))
        rewards = [0.0 if pad else float(r) for r, pad in zip(columns["mixed_reward"], padding, strict=True)]
        return cls(
            task_uid=np.array([str(v) for v in columns["task_uid"]], dtype=object),
            role=np.array([str(v) for v in columns["role"]], dtype=object),
            turn=np.array([int(v or 0) for v in columns["turn"]], dtype=np.int64),
            policy=np.array([str(v) for v in columns["policy"]], dtype=object),
            mixed_reward=np.array(rewards, dtype=np.float64),
            env_error=np.array(columns["env_error"], dtype=bool),
            valid=np.array(columns["valid"], dtype=bool),
            padding=np.array([bool(p) for p in padding], dtype=bool),
        )


def _rows(column: Any) -> list:
    """A non-tensor column from TransferQueue as a list (a NonTensorStack, or the list tensordict returns)."""
    return list(column.tolist() if hasattr(column, "tolist") else column)


def reward_scores(tags: SampleTags, response_lengths: torch.Tensor, width: int) -> torch.Tensor:
    """[n, width] float32: each real row's mixed reward on its last response token (as verl places a reward).

    Padding rows get zeros. A row's length counts its tokens whether or not they are masked, so a sample whose
    response is a masked-out eos keeps its reward in its group.
    """
    scores = torch.zeros((len(tags.padding), width), dtype=torch.float32)
    real = torch.from_numpy(~tags.padding)
    rows = torch.nonzero(real).flatten()
    last = (response_lengths[rows] - 1).clamp(min=0)
    scores[rows, last] = torch.from_numpy(tags.mixed_reward[~tags.padding]).to(torch.float32)
    return scores


def at_grpo_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    tags: SampleTags,
    grouping: str,
    algorithm_config: Any,
) -> torch.Tensor:
    """[n, L] advantages from `at_grpo` grouped by (task uid, role, turn), or by task uid for grouping "task".

    Padding rows take no part in any group and get zero advantages.
    """
    advantages = torch.zeros_like(token_level_rewards)
    real = ~tags.padding
    if not real.any():
        return advantages
    index = torch.from_numpy(np.nonzero(real)[0])
    real_advantages, _ = registered_estimator()(
        token_level_rewards=token_level_rewards[index],
        response_mask=response_mask[index],
        index=tags.task_uid[real],
        config=algorithm_config,
        role=tags.role[real],
        turn=tags.turn[real],
        grouping=grouping,
    )
    advantages[index] = real_advantages
    return advantages


def sample_metrics(tags: SampleTags, grouping: str) -> dict[str, float]:
    """Per-role reward, invalid-move share and zero-variance group share, plus environment failures."""
    real = ~tags.padding
    if not real.any():
        return {}
    metrics = {"mas/env_failed_tasks": float(len(set(tags.task_uid[real & tags.env_error])))}
    for role in sorted(set(tags.role[real])):
        rows = real & (tags.role == role)
        rewards = tags.mixed_reward[rows]
        metrics[f"mas/{role}/reward/mean"] = float(rewards.mean())
        metrics[f"mas/{role}/invalid_share"] = float((~tags.valid[rows]).mean())
        group = group_ids(
            len(rewards), index=tags.task_uid[rows], role=tags.role[rows], turn=tags.turn[rows], grouping=grouping
        )
        highest = np.full(group.max() + 1, -np.inf)
        np.maximum.at(highest, group, rewards)
        lowest = np.full(group.max() + 1, np.inf)
        np.minimum.at(lowest, group, rewards)
        metrics[f"mas/{role}/zero_variance_group_share"] = float((highest == lowest).mean())
    for turn in sorted(set(tags.turn[real].tolist())):
        rows = real & (tags.turn == turn)
        metrics[f"mas/turn_{turn}/reward/mean"] = float(tags.mixed_reward[rows].mean())
        metrics[f"mas/turn_{turn}/invalid_share"] = float((~tags.valid[rows]).mean())
        metrics[f"mas/turn_{turn}/samples"] = float(rows.sum())
    return metrics


def update_audit_record(step: int, policy: str, fields: Sequence[str], data: TensorDict, tags: SampleTags) -> dict:
    """What one policy's actor update received: its field list and, per row, the tags and the advantage.

    A row's `advantage` is the mean over its response tokens and `advantage_spread` the max - min there (AT-GRPO
    spreads one value over a sample's tokens, so the spread is 0); both are None when the batch has no advantages.
    `logprob_gap` is the largest |sampler log-prob - actor's recomputed log-prob| over the row's response tokens
    (None without both), which shows whether the rollout served the weights the actor trains.
    """

    def per_row(name: str) -> list[torch.Tensor] | None:
        return data[name].unbind() if name in data.keys() else None

    rows = []
    advantages, masks = per_row("advantages"), per_row("response_mask")
    sampler, actor = per_row("rollout_log_probs"), per_row("old_log_probs")
    for i in range(len(tags.padding)):
        row = {
            "task_uid": str(tags.task_uid[i]),
            "role": str(tags.role[i]),
            "turn": int(tags.turn[i]),
            "policy": str(tags.policy[i]),
            "padding": bool(tags.padding[i]),
            "reward": float(tags.mixed_reward[i]),
            "advantage": None,
            "advantage_spread": None,
            "logprob_gap": None,
        }
        tokens = masks[i].bool() if masks is not None else None
        if advantages is not None and tokens is not None and tokens.any():
            values = advantages[i][tokens].double()
            row["advantage"] = float(values.mean())
            row["advantage_spread"] = float(values.max() - values.min())
        if sampler is not None and actor is not None and tokens is not None and tokens.any():
            row["logprob_gap"] = float((sampler[i][tokens].double() - actor[i][tokens].double()).abs().max())
        rows.append(row)
    return {"step": step, "policy": policy, "fields": sorted(fields), "rows": rows}


def split_by_policy(
    batch: KVBatchMeta, policy_of_row: Sequence[str], policies: Sequence[str]
) -> dict[str, KVBatchMeta]:
    """The batch's rows per policy, in `policies` order (a policy with no rows this step is left out).

    Raises:
        ValueError: a row names a policy outside `policies`.
    """
    unknown = sorted(set(policy_of_row) - set(policies))
    if unknown:
        raise ValueError(f"at_grpo step: rows name policies {unknown}, not served by this trainer ({list(policies)})")
    parts = {}
    for policy in policies:
        keys = [key for key, owner in zip(batch.keys, policy_of_row, strict=True) if owner == policy]
        if keys:
            parts[policy] = batch.select_keys(keys)
    return parts


# ------------------------------------------------------------------ per-policy resources


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


def check_supported(config: DictConfig, mas: MasConfig) -> None:
    """Reject at start what the AT-GRPO trainer does not run, naming the key."""
    if config.algorithm.adv_estimator != "at_grpo":
        raise MasConfigError(
            f"algorithm.adv_estimator must be at_grpo for AtGrpoTrainer, got {config.algorithm.adv_estimator!r}"
        )
    if config.trainer.v1.trainer_mode != "sync":
        raise MasConfigError("trainer.v1.trainer_mode must be sync: the tree rollout is on-policy")
    if need_critic(config):
        raise MasConfigError("critic: AT-GRPO uses no critic; set algorithm.adv_estimator=at_grpo")
    if len(mas.policy_router().policies) > 1:
        if need_teacher_policy(config):
            raise MasConfigError("distillation.enabled: not supported with several policies")
        reward_model = config.reward.reward_model
        if reward_model.enable and not reward_model.enable_resource_pool:
            raise MasConfigError(
                "reward.reward_model.enable_resource_pool must be true with several policies: "
                "a colocated reward model needs the single global pool"
            )
        if config.trainer.resume_mode == "resume_path":
            raise MasConfigError(
                "trainer.resume_mode=resume_path: with several policies use resume_mode=auto "
                "(each policy resumes from trainer.default_local_dir/<policy>)"
            )
        if OmegaConf.select(config, "global_profiler.steps"):
            raise MasConfigError("global_profiler.steps: profiling is not supported with several policies")


# ------------------------------------------------------------------ the trainer


class AtGrpoTrainer(PPOTrainerSync):
    """verl's V1 sync trainer, with

    - an advantage step that restores each row's own mixed reward (verl's list postprocess copies the last
      output's reward over the others) and groups by (task uid, role, turn) with `at_grpo`;
    - one actor-rollout worker group, server manager (replica actor names carry the policy), checkpoint manager,
      tokenizer and resource pool per policy; rows split by their `policy` tag for log-probs and updates and
      merged back for the advantage step; weight sync, checkpoints and resume per policy;
    - a `PolicyRoutingClient` for the agent loop, so each role's requests reach its policy's servers.

    With one policy (router "shared") it builds exactly what verl builds; checkpoints stay in verl's layout.
    """

    def __init__(self, config: DictConfig):
        self.mas: MasConfig = mas_config_of(config)
        check_supported(config, self.mas)
        self.router: PolicyRouter = self.mas.policy_router()
        self.policies: dict[str, PolicyRuntime] = {}
        super().__init__(config)

    @property
    def several_policies(self) -> bool:
        return len(self.router.policies) > 1

    # ---------------------------------------------------------------- set-up

    def _setup(self):
        if not self.several_policies:
            super()._setup()
            self.policies[self.router.policies[0]] = PolicyRuntime(
                config=self.config,
                tokenizer=self.tokenizer,
                actor_rollout_wg=self.actor_rollout_wg,
                ref_policy_wg=getattr(self, "ref_policy_wg", None),
                ref_in_actor=self.ref_in_actor,
                llm_server_manager=self.llm_server_manager,
                checkpoint_manager=self.checkpoint_manager,
            )
            return
        self._init_tokenizer()
        self._init_dataloader()
        self._init_dump_executor()
        gpus = self.mas.gpus_per_policy(self.config.trainer.n_gpus_per_node)
        nnodes = self.config.trainer.nnodes
        spec = {policy_pool_name(p): [n] * nnodes for p, n in gpus.items()}
        if self.config.reward.reward_model.enable_resource_pool:
            spec["reward_pool"] = [
                self.config.reward.reward_model.n_gpus_per_node
            ] * self.config.reward.reward_model.nnodes
        self.resource_pool_manager = ResourcePoolManager(
            resource_pool_spec=spec, mapping={Role.RewardModel: "reward_pool"} if "reward_pool" in spec else {}
        )
        self.resource_pool_manager.create_resource_pool()
        pools = {p: self.resource_pool_manager.resource_pool_dict[policy_pool_name(p)] for p in gpus}
        configs = {p: policy_trainer_config(self.config, p, s, gpus[p]) for p, s in self.mas.policy_settings().items()}
        for policy, policy_config in configs.items():
            self._check_tokenizer(policy, policy_config)
        roles = {p: self._actor_role(c) for p, c in configs.items()}

        def worker_class_of(policy: str) -> tuple[str, RayClassWithInitArgs]:
            return str(roles[policy]), RayClassWithInitArgs(
                cls=ray.remote(PolicyActorRolloutRefWorker),
                config=configs[policy].actor_rollout_ref,
                role=str(roles[policy]),
            )

        groups = build_policy_worker_groups(pools, worker_class_of, device_name=self.config.trainer.device)
        for policy, group in groups.items():
            group.init_model()
            self.policies[policy] = self._policy_runtime(policy, configs[policy], group, pools[policy])
        rm_pool = self.resource_pool_manager.resource_pool_dict.get("reward_pool")
        self.reward_loop_manager = RewardLoopManager(config=self.config, rm_resource_pool=rm_pool)
        self.teacher_model_manager = None
        self.distillation_config = None
        for runtime in self.policies.values():
            runtime.checkpoint_manager.sleep_replicas()
        self._load_checkpoint()

    def _actor_role(self, policy_config: DictConfig) -> Role:
        model = policy_config.actor_rollout_ref.model
        ref_in_actor = model.get("lora_rank", 0) > 0 or model.get("lora_adapter_path") is not None
        return Role.ActorRolloutRef if need_reference_policy(policy_config) and not ref_in_actor else Role.ActorRollout

    def _policy_runtime(
        self, policy: str, policy_config: DictConfig, group: RayWorkerGroup, pool: RayResourcePool
    ) -> PolicyRuntime:
        model = policy_config.actor_rollout_ref.model
        ref_in_actor = model.get("lora_rank", 0) > 0 or model.get("lora_adapter_path") is not None
        servers = PolicyLLMServerManager.create(
            config=policy_config, policy=policy, worker_group=group, rollout_resource_pool=pool
        )
        engine_config = omega_conf_to_dataclass(policy_config.actor_rollout_ref.rollout.checkpoint_engine)
        engine_config.backend = "naive"  # as verl's trainer: hybrid replicas share the actor's process
        return PolicyRuntime(
            config=policy_config,
            tokenizer=omega_conf_to_dataclass(model).tokenizer,
            actor_rollout_wg=group,
            ref_policy_wg=group if need_reference_policy(policy_config) else None,
            ref_in_actor=ref_in_actor,
            llm_server_manager=servers,
            checkpoint_manager=CheckpointEngineManager(
                config=engine_config, actor_wg=group, replicas=servers.get_replicas()
            ),
        )

    def _check_tokenizer(self, policy: str, policy_config: DictConfig) -> None:
        """The agent loop tokenizes every role's prompt with verl's one tokenizer: each policy must share it."""
        model = policy_config.actor_rollout_ref.model
        tokenizer = omega_conf_to_dataclass(model).tokenizer
        if (
            tokenizer.get_vocab() != self.tokenizer.get_vocab()
            or tokenizer.chat_template != self.tokenizer.chat_template
        ):
            raise MasConfigError(
                f"mas.policies.{policy}.model_path={model.path!r}: its tokenizer differs from "
                f"actor_rollout_ref.model.path's; every policy must share one tokenizer and chat template"
            )

    @contextlib.contextmanager
    def _acting_as(self, policy: str) -> Iterator[None]:
        """Point verl's single-policy attributes at `policy`'s runtime while verl's own step methods run."""
        runtime = self.policies[policy]
        names = (
            "actor_rollout_wg",
            "ref_policy_wg",
            "ref_in_actor",
            "tokenizer",
            "llm_server_manager",
            "checkpoint_manager",
        )
        saved = {name: getattr(self, name, None) for name in names}
        for name in names:
            setattr(self, name, getattr(runtime, name))
        try:
            yield
        finally:
            for name, value in saved.items():
                setattr(self, name, value)

    @contextlib.contextmanager
    def _checkpoint_dir_of(self, policy: str) -> Iterator[None]:
        """Several policies keep one verl checkpoint tree each, under trainer.default_local_dir/<policy>."""
        if not self.several_policies:
            yield
            return
        base = self.config.trainer.default_local_dir
        with open_dict(self.config):
            self.config.trainer.default_local_dir = os.path.join(base, policy)
        try:
            yield
        finally:
            with open_dict(self.config):
                self.config.trainer.default_local_dir = base

    def get_llm_client(self) -> PolicyRoutingClient:
        clients = {p: runtime.llm_server_manager.get_client() for p, runtime in self.policies.items()}
        return PolicyRoutingClient(clients, self.router)

    def _rollout_server_managers(self) -> list:
        return [runtime.llm_server_manager for runtime in self.policies.values()]

    # ---------------------------------------------------------------- weight sync and checkpoints, per policy

    def on_init_end(self):
        for runtime in self.policies.values():
            runtime.checkpoint_manager.update_weights(self.global_steps)

    def on_step_end(self):
        with marked_timer("update_weights", self.timing_raw, color="red"):
            for runtime in self.policies.values():
                runtime.checkpoint_manager.update_weights(self.global_steps)

    def on_sample_end(self):
        for runtime in self.policies.values():
            runtime.checkpoint_manager.sleep_replicas()
        if self.curr_step_profile:
            self._stop_rollout_profiling()

    def _load_checkpoint(self):
        if not self.policies:  # verl's _setup loads before our runtimes exist; the single policy is verl's own
            return super()._load_checkpoint()
        steps = {}
        for policy in self.policies:
            with self._acting_as(policy), self._checkpoint_dir_of(policy):
                super()._load_checkpoint()
            steps[policy] = self.global_steps
        if len(set(steps.values())) > 1:
            raise RuntimeError(f"policies resumed from different steps {steps}; their checkpoints are out of step")

    def _save_checkpoint(self):
        for policy in self.policies:
            with self._acting_as(policy), self._checkpoint_dir_of(policy):
                super()._save_checkpoint()

    # ---------------------------------------------------------------- one training step

    def _step_once(self, metrics: dict, timing_raw: dict, sample_batch_size: int) -> KVBatchMeta:
        """verl's step with log-probs and updates run per policy on that policy's rows."""
        with marked_timer("gen", timing_raw, color="red"):
            self.on_sample_begin()
            batch, off_policy_metrics = self.replay_buffer.sample(
                global_steps=self.global_steps, partition_id="train", batch_size=sample_batch_size
            )
            metrics.update(off_policy_metrics)
            batch.extra_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
            self.on_sample_end()
        if self.reward_loop_manager.reward_loop_worker_handles is None:
            with marked_timer("reward", timing_raw, color="yellow"):
                batch = self._compute_reward_colocate(batch, metrics=metrics)
        parts = split_by_policy(batch, self._row_policies(batch), self.router.policies)
        for policy, part in parts.items():
            with self._acting_as(policy), self._policy_metrics(policy, metrics) as policy_metrics:
                part = self._balance_batch(part, metrics=policy_metrics)
                with marked_timer("old_log_prob", timing_raw, color="blue"):
                    part = self._compute_old_log_prob(part, metrics=policy_metrics)
                if self.use_reference_policy:
                    with marked_timer("ref", timing_raw, color="olive"):
                        part = self._compute_ref_log_prob(part, metrics=policy_metrics)
            parts[policy] = part
        batch = KVBatchMeta.concat(list(parts.values()))
        with marked_timer("adv", timing_raw, color="brown"):
            batch = self._compute_advantage(batch, metrics=metrics)
        # The parts' metadata predates the advantage step; verl's worker fetches only the fields a batch's metadata
        # lists, so each policy's update must take its rows from the batch the advantage step returned.
        policy_of_row = [policy for policy, part in parts.items() for _ in range(len(part))]
        parts = split_by_policy(batch, policy_of_row, self.router.policies)
        if self.config.trainer.critic_warmup <= self.global_steps:
            for policy, part in parts.items():
                if self.mas.update_audit:
                    self._audit_update(policy, part)
                with self._acting_as(policy), self._policy_metrics(policy, metrics) as policy_metrics:
                    with marked_timer("update_actor", timing_raw, color="red"):
                        self._update_actor(part, metrics=policy_metrics)
        return batch

    @contextlib.contextmanager
    def _policy_metrics(self, policy: str, metrics: dict) -> Iterator[dict]:
        """verl's metric names, prefixed with policy/<id>/ when there are several policies."""
        if not self.several_policies:
            yield metrics
            return
        own: dict = {}
        yield own
        metrics.update({f"policy/{policy}/{name}": value for name, value in own.items()})

    def _audit_update(self, policy: str, part: KVBatchMeta) -> None:
        """Append what `policy`'s update is about to receive to `mas.update_audit`, fetched as the worker fetches it
        (only the fields the batch's metadata lists)."""
        fields = list(part.fields or [])
        data = tq.kv_batch_get(keys=part.keys, partition_id=part.partition_id, select_fields=fields + ["extra_fields"])
        tags = SampleTags.from_rows(_rows(data["extra_fields"]), [t.get("is_padding", False) for t in part.tags])
        record = update_audit_record(self.global_steps, policy, fields, data, tags)
        path = os.path.expanduser(self.mas.update_audit)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")

    def _row_policies(self, batch: KVBatchMeta) -> list[str]:
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        padding = [tag.get("is_padding", False) for tag in batch.tags]
        return list(SampleTags.from_rows(_rows(data["extra_fields"]), padding).policy)

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """Restore each row's mixed reward as its score, then at_grpo advantages grouped by (task, role, turn)."""
        fields = ["response_mask", "extra_fields", "rollout_log_probs", "old_log_probs", "ref_log_prob"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        nested_mask = data["response_mask"]
        tags = SampleTags.from_rows(_rows(data.pop("extra_fields")), [t.get("is_padding", False) for t in batch.tags])
        proto = DataProto(batch=data.to_padded_tensor())
        response_mask = proto.batch["response_mask"]
        scores = reward_scores(tags, nested_mask.offsets().diff(), response_mask.shape[1])
        proto.batch["token_level_scores"] = scores
        if self.config.algorithm.use_kl_in_reward:
            proto, kl_metrics = apply_kl_penalty(
                proto, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=self.config.algorithm.kl_penalty
            )
            metrics.update(kl_metrics)
        else:
            proto.batch["token_level_rewards"] = scores
        correction = self.config.algorithm.get("rollout_correction", None)
        corrected = (
            correction is not None and "rollout_log_probs" in proto.batch and not correction.get("bypass_mode", False)
        )
        if corrected:
            proto, correction_metrics = compute_rollout_correction_and_add_to_batch(proto, correction)
            metrics.update(correction_metrics)
        advantages = at_grpo_advantages(
            proto.batch["token_level_rewards"],
            proto.batch["response_mask"],
            tags,
            self.mas.grouping,
            self.config.algorithm,
        )
        out = {"rm_scores": scores, "token_level_rewards": proto.batch["token_level_rewards"]}
        out["advantages"] = out["returns"] = advantages
        if corrected:
            out["response_mask"] = proto.batch["response_mask"]
            if "rollout_is_weights" in proto.batch:
                out["rollout_is_weights"] = proto.batch["rollout_is_weights"]
        nested = TensorDict({k: response_to_nested(v, nested_mask) for k, v in out.items()}, batch_size=len(batch))
        metrics.update(sample_metrics(tags, self.mas.grouping))
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=nested)
