"""`AtGrpoTrainer`: verl 0.9.1's V1 sync PPO trainer with AT-GRPO advantages and one worker group per policy."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterator

import ray
import transfer_queue as tq
from omegaconf import DictConfig, open_dict
from transfer_queue import KVBatchMeta
from verl.experimental.reward_loop import RewardLoopManager
from verl.single_controller.ray import RayClassWithInitArgs, ResourcePoolManager
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1 import PPOTrainerSync
from verl.utils.debug import marked_timer
from verl.utils.ray_utils import auto_await

from verl_mas.group_health import GroupHealthWarnings
from verl_mas.router import PolicyRouter
from verl_mas.verl_engine.adapters import (
    ADAPTER_GROUP,
    AdapterActorRolloutRefWorker,
    adapter_pool_manager,
    adapter_trainer_config,
)
from verl_mas.verl_engine.advantage_step import compute_advantage_step
from verl_mas.verl_engine.batch import batch_tags, split_by_policy
from verl_mas.verl_engine.config import MasConfig, check_supported, mas_config_of
from verl_mas.verl_engine.hooks import TrainerHook, load_trainer_hooks
from verl_mas.verl_engine.phases import PolicySpan, SplitWorkerGroup, prime_dispatch_layout, run_phase
from verl_mas.verl_engine.placement import policy_pool_manager
from verl_mas.verl_engine.policies import (
    PolicyActorRolloutRefWorker,
    PolicyRuntime,
    actor_role,
    apply_policy_model,
    build_policy_runtime,
    build_policy_worker_groups,
    check_shared_tokenizer,
    policy_pool_name,
    policy_trainer_config,
)
from verl_mas.verl_engine.routing import PolicyRoutingClient
from verl_mas.verl_engine.shared_folders import check_shared_folders
from verl_mas.verl_engine.timeline import append_records


def run_pool_manager(config: DictConfig, mas: MasConfig) -> ResourcePoolManager:
    """The run's resource pools: one group of adapters on every GPU (`mas.lora_per_role`), else one pool per policy,
    pinned by `mas.policies.*` (checked against Ray's nodes)."""
    return adapter_pool_manager(config) if mas.lora_per_role else policy_pool_manager(config, mas)


class AtGrpoTrainer(PPOTrainerSync):
    """verl's V1 sync trainer, with

    - an advantage step (`advantage_step`) that restores each row's own mixed reward (verl's list postprocess copies
      the last output's reward over the others) and groups by (task uid, role, turn) with `at_grpo`;
    - one actor-rollout worker group, server manager (replica actor names carry the policy), checkpoint manager,
      tokenizer and resource pool per policy; rows split by their `policy` tag for log-probs and updates and
      merged back for the advantage step; weight sync, checkpoints and resume per policy;
    - with several policies, every per-policy phase (old and ref log-probs, update, weight sync, checkpoint save
      and load) dispatched to all policies' worker groups at once and awaited together (`phases.run_phase`), with
      each policy's time as `policy/<id>/timing_s/<phase>`, the phase's wall time as verl's `timing_s/<phase>`,
      and the spans in `mas.timeline`;
    - a `PolicyRoutingClient` for the agent loop, so each role's requests reach its policy's servers;
    - the `trainer_hooks:` of the config (`hooks.TrainerHook`), called at each step's events;
    - the health of each step's advantage groups as `group_health/` metrics, with a warning once per cause
      (`verl_mas.group_health`).

    The step is written once for any number of policies. With one policy (router "shared") the trainer builds exactly
    what verl builds, runs each phase as verl's own call (no split dispatch, no per-policy metrics or timeline) and
    keeps verl's checkpoint layout: `several_policies` forks only where verl's single-policy machinery differs.
    """

    def __init__(self, config: DictConfig, pool_manager: ResourcePoolManager):
        """`pool_manager`: the run's pools (`run_pool_manager`), which the task runner built to check the cluster's
        logical CPUs; several policies are placed in them, one policy in the pools verl's own set-up builds."""
        self.mas: MasConfig = mas_config_of(config)
        self.resource_pool_manager = pool_manager
        check_supported(config, self.mas)
        self.router: PolicyRouter = self.mas.policy_router()
        self.policies: dict[str, PolicyRuntime] = {}
        self._timeline = os.path.abspath(os.path.expanduser(self.mas.timeline)) if self.mas.timeline else None
        self.hooks: dict[str, TrainerHook] = load_trainer_hooks(config)
        check_shared_folders(config, self.mas, self.hooks)  # on several Ray nodes: every node sees the run's folders
        self.group_health_warnings = GroupHealthWarnings()
        if not self.several_policies:  # verl builds the one policy from actor_rollout_ref: give it the policy's model
            apply_policy_model(config, self.mas.policy_settings()[self.router.policies[0]])
        super().__init__(config)

    @property
    def several_policies(self) -> bool:
        return len(self.router.policies) > 1

    @property
    def lora_per_role(self) -> bool:
        """One base model with one LoRA adapter per policy, in one worker group and one server (`mas.lora_per_role`):
        every policy's runtime is that group's."""
        return self.mas.lora_per_role

    def _one_per_group(self) -> list[str]:
        """One policy per worker group: the policies whose runtime a group-wide phase (weight sync, checkpoints) runs
        on, once for each group."""
        seen: dict[int, str] = {}
        for policy, runtime in self.policies.items():
            seen.setdefault(id(runtime), policy)
        return list(seen.values())

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
        if self.lora_per_role:  # one group holds every policy's adapter on all the GPUs
            gpus = {ADAPTER_GROUP: self.config.trainer.n_gpus_per_node}
            adapters = adapter_trainer_config(self.config, self.router.policies, gpus[ADAPTER_GROUP], self._timeline)
            configs = {ADAPTER_GROUP: adapters}
            worker_class = AdapterActorRolloutRefWorker
        else:
            gpus = self.mas.gpus_per_policy(self.config.trainer.n_gpus_per_node)
            configs = {
                p: policy_trainer_config(self.config, p, s, gpus[p], timeline=self._timeline)
                for p, s in self.mas.policy_settings().items()
            }
            worker_class = PolicyActorRolloutRefWorker
        self.resource_pool_manager.create_resource_pool()
        pools = {p: self.resource_pool_manager.resource_pool_dict[policy_pool_name(p)] for p in gpus}
        for policy, policy_config in configs.items():
            check_shared_tokenizer(policy, policy_config, self.tokenizer)
        roles = {p: actor_role(c) for p, c in configs.items()}

        def worker_class_of(policy: str) -> tuple[str, RayClassWithInitArgs]:
            return str(roles[policy]), RayClassWithInitArgs(
                cls=ray.remote(worker_class),
                config=configs[policy].actor_rollout_ref,
                role=str(roles[policy]),
            )

        groups = build_policy_worker_groups(pools, worker_class_of, device_name=self.config.trainer.device)
        runtimes = {}
        for name, group in groups.items():
            group.init_model()
            prime_dispatch_layout(group, ["actor", "ref"] if roles[name] == Role.ActorRolloutRef else ["actor"])
            runtimes[name] = build_policy_runtime(name, configs[name], group, pools[name])
        self.policies = {p: runtimes[ADAPTER_GROUP if self.lora_per_role else p] for p in self.router.policies}
        rm_pool = self.resource_pool_manager.resource_pool_dict.get("reward_pool")
        self.reward_loop_manager = RewardLoopManager(config=self.config, rm_resource_pool=rm_pool)
        self.teacher_model_manager = None
        self.distillation_config = None
        for policy in self._one_per_group():
            self.policies[policy].checkpoint_manager.sleep_replicas()
        self._load_checkpoint()

    @contextlib.contextmanager
    def _acting_as(self, policy: str, group: SplitWorkerGroup | None = None) -> Iterator[None]:
        """Point verl's single-policy attributes at `policy`'s runtime while verl's own step methods run; with
        `group`, the actor (and reference) worker group is that split view of the policy's group (`run_phase`)."""
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
        if group is not None:
            self.actor_rollout_wg = group
            if runtime.ref_policy_wg is not None:  # the reference lives in the actor's worker group
                self.ref_policy_wg = group
        try:
            yield
        finally:
            for name, value in saved.items():
                setattr(self, name, value)

    @contextlib.contextmanager
    def _checkpoint_dir_of(self, policy: str) -> Iterator[None]:
        """Several policies keep one verl checkpoint tree each, under trainer.default_local_dir/<policy>; one group of
        adapters (`mas.lora_per_role`) keeps verl's one tree, every adapter in it."""
        if not self.several_policies or self.lora_per_role:
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
        # policies sharing one worker group are its adapters (mas.lora_per_role), each named after its policy
        adapters = {p: p for p in self.policies} if len(self._one_per_group()) < len(self.policies) else None
        return PolicyRoutingClient(clients, self.router, adapters=adapters)

    def _rollout_server_managers(self) -> list:
        return [self.policies[p].llm_server_manager for p in self._one_per_group()]

    # ---------------------------------------------------------------- every policy at once

    def run_phase(
        self,
        phase: str,
        run: Callable[[str, SplitWorkerGroup | None], object],
        *,
        step: int | None,
        metrics: dict | None = None,
        sequential: bool = False,
        policies: list[str] | None = None,
    ) -> dict:
        """`run(policy, group)` for every policy (all by default), through `phases.run_phase`: each policy's worker
        call goes out before any is awaited (`sequential`: one policy after the other), `group` being that policy's
        split worker group; each policy's time goes to `metrics` as `policy/<id>/timing_s/<phase>`, and its span to
        the timeline. With one policy, verl's own call: `run(policy, None)` on verl's worker groups, as verl times it.
        Adapters of one worker group (`mas.lora_per_role`) always run one after the other.
        """
        policies = list(self.policies) if policies is None else policies
        if not self.several_policies:
            return {policy: run(policy, None) for policy in policies}
        sequential = sequential or self.lora_per_role
        groups = {policy: self.policies[policy].actor_rollout_wg for policy in policies}
        results, spans = run_phase(policies, groups, run, sequential=sequential)
        if metrics is not None:
            metrics.update({f"policy/{p}/timing_s/{phase}": span.seconds for p, span in spans.items()})
        self._write_spans(phase, spans, step, "sequential" if sequential else "concurrent")
        return results

    def _write_spans(self, phase: str, spans: dict[str, PolicySpan], step: int | None, mode: str) -> None:
        if not self._timeline:
            return
        append_records(
            self._timeline,
            [
                {"kind": "phase", "step": step, "phase": phase, "policy": p, "mode": mode, "method": span.method}
                | {"start": span.start, "dispatched": span.dispatched, "ready": span.ready, "end": span.end}
                for p, span in spans.items()
            ],
        )

    def _policy_phase(
        self,
        phase: str,
        method: Callable[..., KVBatchMeta],
        parts: dict[str, KVBatchMeta],
        metrics: dict,
        *,
        sequential: bool = False,
    ) -> dict[str, KVBatchMeta]:
        """verl's `method(batch, metrics=...)` (old or ref log-prob, actor update) on every policy's rows at once."""

        def run(policy: str, group: SplitWorkerGroup | None) -> KVBatchMeta:
            if self.lora_per_role:  # the group's next calls run under this policy's adapter
                self.policies[policy].actor_rollout_wg.set_adapter(policy)
            with self._acting_as(policy, group), self._policy_metrics(policy, metrics) as policy_metrics:
                return method(parts[policy], metrics=policy_metrics)

        return self.run_phase(
            phase, run, step=self.global_steps, metrics=metrics, sequential=sequential, policies=list(parts)
        )

    def compute_old_log_probs(
        self, parts: dict[str, KVBatchMeta], metrics: dict, *, sequential: bool = False
    ) -> dict[str, KVBatchMeta]:
        """verl's old log-probs of each policy's rows, on every policy at once (`sequential`: one after the other)."""
        return self._policy_phase("old_log_prob", self._compute_old_log_prob, parts, metrics, sequential=sequential)

    def update_actors(self, parts: dict[str, KVBatchMeta], metrics: dict, *, sequential: bool = False) -> None:
        """verl's actor update of each policy on its rows, on every policy at once (`sequential`: one after the
        other)."""
        self._policy_phase("update_actor", self._update_actor, parts, metrics, sequential=sequential)

    def _sync_weights(self, metrics: dict | None) -> None:
        """verl's naive weight sync (`CheckpointEngineManager.update_weights`: one non-blocking `update_weights`
        call on the worker group) for every policy at once."""

        def run(policy: str, group: SplitWorkerGroup | None) -> None:
            manager = self.policies[policy].checkpoint_manager
            if group is None:  # one policy: verl's own call
                manager.update_weights(self.global_steps)
                return
            if manager.backend != "naive":
                raise NotImplementedError(f"policy {policy}: weight sync backend {manager.backend!r} is not split")
            manager.actor_wg = group
            try:
                manager.update_weights(self.global_steps)
            finally:
                manager.actor_wg = self.policies[policy].actor_rollout_wg

        step = self.global_steps if metrics is not None else None
        self.run_phase("update_weights", run, step=step, metrics=metrics, policies=self._one_per_group())

    @auto_await
    async def _sleep_replicas(self) -> None:
        """Every policy's replicas go to sleep together (verl's `sleep_replicas`, over all managers)."""
        replicas = [r for p in self._one_per_group() for r in self.policies[p].checkpoint_manager.replicas]
        await asyncio.gather(*(replica.sleep() for replica in replicas))

    def _sync_metrics(self) -> dict:
        """verl merges `_pending_sync_metrics` into the step's metrics right after `on_step_end`."""
        if getattr(self, "_pending_sync_metrics", None) is None:
            self._pending_sync_metrics = {}
        return self._pending_sync_metrics

    # ---------------------------------------------------------------- weight sync and checkpoints, per policy

    def on_init_end(self):
        self._sync_weights(metrics=None)

    def on_step_end(self):
        with marked_timer("update_weights", self.timing_raw, color="red"):
            self._sync_weights(metrics=self._sync_metrics())

    def on_sample_end(self):
        self._sleep_replicas()
        if self.curr_step_profile:
            self._stop_rollout_profiling()

    def _load_checkpoint(self):
        if not self.several_policies:  # verl's _setup loads the single policy itself, before `policies` is filled
            return super()._load_checkpoint()

        def run(policy: str, group: SplitWorkerGroup) -> int:
            with self._acting_as(policy, group), self._checkpoint_dir_of(policy):
                PPOTrainerSync._load_checkpoint(self)
                return self.global_steps

        steps = self.run_phase("load_checkpoint", run, step=None, policies=self._one_per_group())
        if len(set(steps.values())) > 1:
            raise RuntimeError(f"policies resumed from different steps {steps}; their checkpoints are out of step")
        self.global_steps = next(iter(steps.values()))

    def _save_checkpoint(self):
        def run(policy: str, group: SplitWorkerGroup | None) -> None:
            with self._acting_as(policy, group), self._checkpoint_dir_of(policy):
                PPOTrainerSync._save_checkpoint(self)

        policies = self._one_per_group()
        self.run_phase("save_checkpoint", run, step=self.global_steps, metrics=self._sync_metrics(), policies=policies)

    # ---------------------------------------------------------------- one training step

    def _step_once(self, metrics: dict, timing_raw: dict, sample_batch_size: int) -> KVBatchMeta:
        """verl's step with log-probs and updates run per policy on that policy's rows, all policies at once, and
        the trainer hooks' events around them."""
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
                parts[policy] = self._balance_batch(part, metrics=policy_metrics)
        self._call_hooks("before_log_probs", parts)
        with marked_timer("old_log_prob", timing_raw, color="blue"):
            parts = self.compute_old_log_probs(parts, metrics)
        self._call_hooks("after_log_probs", parts)
        if self.use_reference_policy:
            with marked_timer("ref", timing_raw, color="olive"):
                parts = self._policy_phase("ref", self._compute_ref_log_prob, parts, metrics)
        batch = KVBatchMeta.concat(list(parts.values()))
        with marked_timer("adv", timing_raw, color="brown"):
            batch = self._compute_advantage(batch, metrics=metrics)
        # The parts' metadata predates the advantage step; verl's worker fetches only the fields a batch's metadata
        # lists, so each policy's update must take its rows from the batch the advantage step returned.
        policy_of_row = [policy for policy, part in parts.items() for _ in range(len(part))]
        parts = split_by_policy(batch, policy_of_row, self.router.policies)
        if self.config.trainer.critic_warmup <= self.global_steps:
            self._call_hooks("before_update", parts)
            with marked_timer("update_actor", timing_raw, color="red"):
                self.update_actors(parts, metrics)
            self._call_hooks("after_update", parts)
        return batch

    def _call_hooks(self, event: str, parts: dict[str, KVBatchMeta]) -> None:
        for hook in self.hooks.values():
            getattr(hook, event)(self, parts)

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
        """Each row's own mixed reward, then at_grpo advantages grouped by `mas.grouping`, and the health of those
        groups (`advantage_step.compute_advantage_step`)."""
        return compute_advantage_step(
            batch,
            metrics,
            algorithm=self.config.algorithm,
            mas=self.mas,
            kl_ctrl=self.kl_ctrl_in_reward if self.config.algorithm.use_kl_in_reward else None,
            warnings=self.group_health_warnings,
            step=self.global_steps,
        )
