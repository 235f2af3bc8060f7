"""Per-policy resources of the AT-GRPO trainer: worker groups, LLM servers named after their policy (and the worker
that finds its own), the copy of verl's config each policy runs with, and each policy's runtime built from them."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import ray
from omegaconf import DictConfig, OmegaConf, open_dict
from verl.checkpoint_engine import CheckpointEngineManager
from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls,
)
from verl.trainer.ppo.utils import Role, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.engine_workers import ActorRolloutRefWorker
from verl.workers.rollout.llm_server import LLMServerManager
from verl.workers.rollout.replica import get_rollout_replica_class

from verl_mas.verl_engine.config import MasConfigError, PolicyConfig
from verl_mas.verl_engine.timeline import append_records

MAS_POLICY_KEY = "mas_policy"  # in actor_rollout_ref.rollout.custom (verl's free-form slot): the worker's policy
MAS_TIMELINE_KEY = "mas_timeline"  # in the same slot: mas.timeline, where the worker writes its compute spans
ADAPTERS_KEY = "mas_adapters"  # in the same slot: the LoRA adapters one worker group and server hold (lora_per_role)
# verl's vLLM weight sync meets the server's workers on the socket ipc:///tmp/rl-colocate-zmq-<job>-replica-<r>-rank-<l>
# .sock; the server side reads <job> from this variable, the worker side from Ray's job id (see policy_job_id).
VLLM_JOB_ID_ENV = "VERL_RAY_JOB_ID"


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


def policy_job_id(job_id: str, policy: str, node_id: str) -> str:
    """The job id in a policy's weight-sync socket path. verl names the socket after the job, the replica rank and
    the local rank only, and each policy's replica ranks start at 0: two policies syncing at once bound the same path,
    and a server could meet the other policy's sender (the first concurrent run hung in its first weight sync after an
    update). One sync after the other never overlapped on it. The policy keeps the paths apart; the start of the Ray
    node's id keeps two launches on one machine apart (every fresh Ray cluster's first job is 01000000, and two
    launches with a policy of the same name hung in their weight sync)."""
    return f"{job_id}-{node_id[:8]}-mas_{policy}"


def _policy_vllm_server_class(policy: str) -> type:
    """verl's vLLM HTTP server whose weight-sync socket path carries `policy` (read by its vLLM workers, which it
    starts after __init__)."""
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    class PolicyVllmHttpServer(vLLMHttpServer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            node_id = ray.get_runtime_context().get_node_id()
            os.environ[VLLM_JOB_ID_ENV] = policy_job_id(os.environ[VLLM_JOB_ID_ENV], policy, node_id)

    return PolicyVllmHttpServer


class PolicyLLMServerManager(LLMServerManager):
    """verl's server manager whose replicas name their server actors `mas_<policy>_<rollout>_server_<rank>_<node>`.

    Replica ranks stay 0..R-1 within each policy (a hybrid replica indexes its own policy's worker group by rank);
    the policy in the name keeps two policies' servers apart, and `PolicyActorRolloutRefWorker` looks its server up
    under the same name for weight sync. With vLLM, the servers' weight-sync socket path carries the policy too
    (`policy_job_id`), so that policies can sync at the same time.
    """

    def __init__(self, config: DictConfig, *, policy: str, **kwargs: Any) -> None:
        rollout = config.actor_rollout_ref.rollout
        replica_class = get_rollout_replica_class(rollout.name, disaggregation_enabled=rollout.disaggregation.enabled)
        prefix = server_name_prefix(policy, rollout.name)
        server_class = None
        if rollout.name == "vllm" and not rollout.disaggregation.enabled:
            server_class = _policy_vllm_server_class(policy)
            adapters = (rollout.get("custom") or {}).get(ADAPTERS_KEY)
            if adapters:  # one base model serving one adapter per role (mas.lora_per_role)
                from verl_mas.verl_engine.adapter_serving import adapter_server_class  # imports vLLM

                server_class = adapter_server_class(server_class, list(adapters))
            server_class = ray.remote(server_class)

        class PolicyReplica(replica_class):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                if server_class is not None:
                    self.server_class = server_class

            def _get_server_name_prefix(self) -> str:
                return prefix

        self.rollout_replica_class = PolicyReplica
        super().__init__(config, **kwargs)


class PolicyActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's actor-rollout worker whose rollout adapter finds its own policy's server (see PolicyLLMServerManager),
    and whose per-step methods return at once, so that the trainer keeps every policy's workers busy together.

    The policy comes from `actor_rollout_ref.rollout.custom.mas_policy`, which `policy_trainer_config` sets.
    `compute_log_prob`, `compute_ref_log_prob`, `update_actor`, `save_checkpoint` and `load_checkpoint` are verl's,
    registered again with the same dispatch and `blocking=False` (verl's own `update_weights` already is): the worker
    group hands back Ray object refs instead of waiting, and `verl_mas.verl_engine.phases.run_phase` waits for every
    policy's refs together. Each call's compute time goes to `mas.timeline` when it is set (`custom.mas_timeline`).
    Only the trainer's several-policy path builds this worker; `shared` runs keep verl's own, blocking one.
    """

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        super().init_model()
        rollout = getattr(self, "rollout", None)
        if rollout is None:
            return
        policy = self.config.rollout.custom[MAS_POLICY_KEY]
        prefix = server_name_prefix(policy, self.config.rollout.name)
        rollout._get_server_name_prefix = lambda: prefix
        if getattr(rollout, "zmq_handle", None) is not None:  # vLLM's weight-sync socket, as its server names it
            context = ray.get_runtime_context()
            job_id = context.get_job_id()
            verl_part = f"-zmq-{job_id}-replica-"
            if verl_part not in rollout.zmq_handle:
                raise RuntimeError(f"verl's weight-sync socket {rollout.zmq_handle!r} lacks {verl_part!r}")
            ours = f"-zmq-{policy_job_id(job_id, policy, context.get_node_id())}-replica-"
            rollout.zmq_handle = rollout.zmq_handle.replace(verl_part, ours)

    @contextlib.contextmanager
    def _timed(self, method: str) -> Iterator[None]:
        """Append this call's compute span to the run's timeline (nothing when mas.timeline is unset)."""
        custom = self.config.rollout.get("custom") or {}
        path = custom.get(MAS_TIMELINE_KEY)
        start = time.time()
        try:
            yield
        finally:
            if path:
                record = {"kind": "worker", "policy": custom.get(MAS_POLICY_KEY), "method": method}
                record.update(rank=self.rank, pid=os.getpid(), start=start, end=time.time())
                append_records(path, [record])

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="ref"), blocking=False)
    def compute_ref_log_prob(self, data):
        with self._timed("compute_ref_log_prob"):
            return super().compute_ref_log_prob(data)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"), blocking=False)
    def compute_log_prob(self, data):
        with self._timed("compute_log_prob"):
            return super().compute_log_prob(data)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"), blocking=False)
    def update_actor(self, data):
        with self._timed("update_actor"):
            return super().update_actor(data)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=False):
        with self._timed("load_checkpoint"):
            return super().load_checkpoint(local_path, hdfs_path, del_local_after_load)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        with self._timed("save_checkpoint"):
            return super().save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def update_weights(self, global_steps: int = None, mode: str = "auto"):
        with self._timed("update_weights"):
            return await super().update_weights(global_steps=global_steps, mode=mode)


def apply_policy_model(config: DictConfig, settings: PolicyConfig) -> None:
    """Set `actor_rollout_ref.model` to the policy's model and LoRA rank, in place.

    A LoRA policy's servers load the base weights from the model path themselves (verl's `rollout.load_format`
    `dummy` becomes `auto`): the base is frozen, so only the adapter needs to travel, and verl's sync of the base
    into a LoRA-enabled vLLM fails on a model whose output layer is tied to its embeddings (vLLM 0.29 refused the
    tiny CPU-stack model's `lm_head.weight`).
    """
    with open_dict(config):
        model = config.actor_rollout_ref.model
        if settings.model_path:
            model.path = settings.model_path
        if settings.lora_rank:
            model.lora_rank = settings.lora_rank
        rollout = config.actor_rollout_ref.rollout
        if model.get("lora_rank", 0) > 0 and rollout.get("load_format") == "dummy":
            rollout.load_format = "auto"


def policy_trainer_config(
    config: DictConfig, policy: str, settings: PolicyConfig, n_gpus_per_node: int, timeline: str | None = None
) -> DictConfig:
    """A copy of verl's whole config in which actor_rollout_ref is this policy's (model, LoRA, GPUs), and whose
    `actor_rollout_ref.rollout.custom` names the policy and the timeline file its workers write to."""
    policy_config = OmegaConf.create(OmegaConf.to_container(config, resolve=True))
    apply_policy_model(policy_config, settings)
    with open_dict(policy_config):
        policy_config.actor_rollout_ref.rollout.n_gpus_per_node = n_gpus_per_node
        policy_config.actor_rollout_ref.rollout.custom = {
            **(policy_config.actor_rollout_ref.rollout.get("custom") or {}),
            MAS_POLICY_KEY: policy,
            MAS_TIMELINE_KEY: timeline,
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


def ref_in_actor(policy_config: DictConfig) -> bool:
    """Whether verl runs the policy's reference in its actor: a LoRA policy's reference is its base, adapter off."""
    model = policy_config.actor_rollout_ref.model
    return model.get("lora_rank", 0) > 0 or model.get("lora_adapter_path") is not None


def actor_role(policy_config: DictConfig) -> Role:
    """The role of the policy's worker group: with the reference model in it, unless verl runs it in the actor."""
    with_reference = need_reference_policy(policy_config) and not ref_in_actor(policy_config)
    return Role.ActorRolloutRef if with_reference else Role.ActorRollout


def check_shared_tokenizer(policy: str, policy_config: DictConfig, tokenizer: Any) -> None:
    """The agent loop tokenizes every role's prompt with verl's one `tokenizer`: each policy must share it.

    Raises:
        MasConfigError: naming the policy's model path, whose tokenizer or chat template differs.
    """
    model = policy_config.actor_rollout_ref.model
    own = omega_conf_to_dataclass(model).tokenizer
    if own.get_vocab() != tokenizer.get_vocab() or own.chat_template != tokenizer.chat_template:
        raise MasConfigError(
            f"mas.policies.{policy}.model_path={model.path!r}: its tokenizer differs from "
            f"actor_rollout_ref.model.path's; every policy must share one tokenizer and chat template"
        )


def build_policy_runtime(
    policy: str, policy_config: DictConfig, group: RayWorkerGroup, pool: RayResourcePool
) -> PolicyRuntime:
    """The runtime of `policy` on its worker group (initialised): its servers, named after it, and its checkpoint
    engine over them."""
    servers = PolicyLLMServerManager.create(
        config=policy_config, policy=policy, worker_group=group, rollout_resource_pool=pool
    )
    engine_config = omega_conf_to_dataclass(policy_config.actor_rollout_ref.rollout.checkpoint_engine)
    engine_config.backend = "naive"  # as verl's trainer: hybrid replicas share the actor's process
    # (and the trainer's weight sync relies on it: the naive sync is one non-blocking worker call, split by run_phase)
    return PolicyRuntime(
        config=policy_config,
        tokenizer=omega_conf_to_dataclass(policy_config.actor_rollout_ref.model).tokenizer,
        actor_rollout_wg=group,
        ref_policy_wg=group if need_reference_policy(policy_config) else None,
        ref_in_actor=ref_in_actor(policy_config),
        llm_server_manager=servers,
        checkpoint_manager=CheckpointEngineManager(
            config=engine_config, actor_wg=group, replicas=servers.get_replicas()
        ),
    )
