"""`AtGrpoTrainer`: verl 0.9.1's V1 sync PPO trainer with AT-GRPO advantages and one worker group per policy."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

import ray
import transfer_queue as tq
from omegaconf import DictConfig, open_dict
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.checkpoint_engine import CheckpointEngineManager
from verl.experimental.reward_loop import RewardLoopManager
from verl.protocol import DataProto
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    ResourcePoolManager,
)
from verl.trainer.ppo.ray_trainer import apply_kl_penalty
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.trainer.ppo.utils import Role, need_reference_policy
from verl.trainer.ppo.v1 import PPOTrainerSync
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.debug import marked_timer
from verl.workers.utils.padding import response_to_nested

from verl_mas.router import PolicyRouter
from verl_mas.verl_engine.agent_loop import mas_config_of
from verl_mas.verl_engine.batch import (
    append_update_audit,
    at_grpo_advantages,
    batch_tags,
    infra_failures,
    reward_scores,
    sample_metrics,
    split_by_policy,
)
from verl_mas.verl_engine.config import MasConfig, MasConfigError, check_supported
from verl_mas.verl_engine.policies import (
    PolicyActorRolloutRefWorker,
    PolicyLLMServerManager,
    PolicyRuntime,
    build_policy_worker_groups,
    policy_pool_name,
    policy_trainer_config,
)
from verl_mas.verl_engine.routing import PolicyRoutingClient

logger = logging.getLogger(__name__)


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
                    append_update_audit(self.mas.update_audit, self.global_steps, policy, part)
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

    def _row_policies(self, batch: KVBatchMeta) -> list[str]:
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        return list(batch_tags(data["extra_fields"], batch.tags).policy)

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """Restore each row's mixed reward as its score, then at_grpo advantages grouped by (task, role, turn)."""
        fields = ["response_mask", "extra_fields", "rollout_log_probs", "old_log_probs", "ref_log_prob"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        nested_mask = data["response_mask"]
        tags = batch_tags(data.pop("extra_fields"), batch.tags)
        metrics.update(infra_failures(tags, self.mas.max_infra_failure_share))  # stops the run past the share
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
