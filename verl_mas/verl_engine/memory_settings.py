"""What the memory plan reads from a composed config: the settings of each actor worker group (a policy, or the one
group of `mas.lora_per_role`'s adapters)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl_mas.verl_engine.model_shape import DTYPE_BYTES, LORA_TARGETS, Lora, ModelShape, model_shape

DEFAULT_MEAN_SAMPLE_TOKENS = 1024  # a 300-600 token prompt and a few-hundred-token answer (docs/gpu.md)
ALL_LINEAR = "all-linear"


@dataclass(frozen=True)
class PolicySettings:
    """What the plan of one actor worker group reads from the composed config."""

    policy: str
    model_path: str
    shape: ModelShape
    shape_source: str
    gpus: int
    roles: tuple[str, ...]  # the roles this group serves
    parallel: bool  # the workflow's roles answer each turn at once
    tasks: int  # data.train_batch_size
    k: int  # mas.rollout.k
    prompt_tokens: int
    response_tokens: int
    mean_sample_tokens: int
    model_bytes: int  # parameter and gradient width of the actor (fsdp_config.model_dtype)
    param_offload: bool
    optimizer_offload: bool
    remove_padding: bool
    gradient_checkpointing: bool
    dynamic_batch: bool
    update_tokens: int  # ppo_max_token_len_per_gpu (dynamic), or micro-batch samples x the length cap
    log_prob_tokens: int
    tp: int
    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    prefix_caching: bool
    sleeps: bool  # vLLM releases its memory during the log-prob and update phases
    kv_bytes: int  # KV cache dtype width
    lora: Lora | None = None  # None: every weight is trained
    gpus_key: str = "trainer.n_gpus_per_node"  # the key that sets this group's GPUs per node


def _select(config: DictConfig, key: str, default: Any = None) -> Any:
    value = OmegaConf.select(config, key, default=default)
    return default if value is None else value


def lora_targets(config: DictConfig) -> tuple[str, ...]:
    """The linear layers `actor_rollout_ref.model.target_modules` adapts: `all-linear` or a list of their names.

    Raises:
        ValueError: a name the plan cannot size, naming the key and the names it can.
    """
    key = "actor_rollout_ref.model.target_modules"
    targets = _select(config, key, ALL_LINEAR)
    if targets == ALL_LINEAR:
        return LORA_TARGETS
    names = [targets] if isinstance(targets, str) else list(targets)
    unknown = [name for name in names if name not in LORA_TARGETS]
    if unknown:
        raise ValueError(
            f"{key}: the memory plan sizes {ALL_LINEAR!r} or names among {list(LORA_TARGETS)}, got {unknown}"
        )
    return tuple(names)


def policy_settings(config: DictConfig, mean_sample_tokens: int = DEFAULT_MEAN_SAMPLE_TOKENS) -> list[PolicySettings]:
    """Every actor worker group's settings from a composed config whose attention keys are filled in
    (`fill_attention`): one per policy, or with `mas.lora_per_role` the one group of every policy's adapter."""
    from verl_mas.env import make_env
    from verl_mas.verl_engine.config import MasConfig

    mas = MasConfig.from_mapping(OmegaConf.to_container(config.mas, resolve=True))
    workflow = make_env(mas.env, **mas.env_options).workflow()
    router = mas.policy_router()
    nodes = mas.nodes_per_policy(int(_select(config, "trainer.nnodes", 1)))
    gpus = mas.gpus_per_policy(int(config.trainer.n_gpus_per_node))
    ref = "actor_rollout_ref"
    actor, rollout, fsdp = f"{ref}.actor", f"{ref}.rollout", f"{ref}.actor.fsdp_config"
    prompt, response = int(config.data.max_prompt_length), int(config.data.max_response_length)
    dynamic = bool(_select(config, f"{actor}.use_dynamic_bsz", False))
    micro = _select(config, f"{actor}.ppo_micro_batch_size_per_gpu")
    update_tokens = int(_select(config, f"{actor}.ppo_max_token_len_per_gpu", 16384))
    log_prob_tokens = int(_select(config, f"{rollout}.log_prob_max_token_len_per_gpu", update_tokens))
    if not dynamic:
        if micro is None:
            raise ValueError(f"{actor}.ppo_micro_batch_size_per_gpu: needed when use_dynamic_bsz is false")
        update_tokens = log_prob_tokens = int(micro) * (prompt + response)
    model_rank = int(_select(config, f"{ref}.model.lora_rank", 0))
    # (policy, the key of its model path, roles, GPUs and their key, LoRA) per actor worker group
    groups: list[tuple[str, str, tuple[str, ...], int, str, Lora | None]] = []
    if mas.lora_per_role:  # one group, one base, one adapter per policy; vLLM also holds verl's own synced adapter
        from verl_mas.verl_engine.adapters import ADAPTER_GROUP

        first = router.policies[0]
        lora = Lora(model_rank, len(router.policies), len(router.policies) + 1, lora_targets(config))
        roles = tuple(role for role, _ in router.role_to_policy)
        n_gpus = gpus[first] * nodes[first]
        groups.append((ADAPTER_GROUP, f"{ref}.model.path", roles, n_gpus, "trainer.n_gpus_per_node", lora))
    else:
        for policy, policy_config in mas.policy_settings().items():
            rank = policy_config.lora_rank or model_rank  # a policy's rank replaces the model's (apply_policy_model)
            groups.append((
                policy,
                f"mas.policies.{policy}.model_path" if policy_config.model_path else f"{ref}.model.path",
                tuple(role for role, served_by in router.role_to_policy if served_by == policy),
                gpus[policy] * nodes[policy],
                "trainer.n_gpus_per_node" if policy == "shared" else f"mas.policies.{policy}.n_gpus_per_node",
                Lora(rank, targets=lora_targets(config)) if rank else None,
            ))  # fmt: skip
    settings = []
    for policy, path_key, roles, n_gpus, gpus_key, lora in groups:
        path = str(OmegaConf.select(config, path_key))
        shape, source = model_shape(path, path_key)
        settings.append(
            PolicySettings(
                policy=policy,
                model_path=path,
                shape=shape,
                shape_source=source,
                gpus=n_gpus,
                roles=roles,
                parallel=workflow.mode == "parallel",
                tasks=int(config.data.train_batch_size),
                k=mas.rollout.k,
                prompt_tokens=prompt,
                response_tokens=response,
                mean_sample_tokens=mean_sample_tokens,
                model_bytes=DTYPE_BYTES[str(_select(config, f"{fsdp}.model_dtype", "fp32"))],
                param_offload=bool(_select(config, f"{fsdp}.param_offload", False)),
                optimizer_offload=bool(_select(config, f"{fsdp}.optimizer_offload", False)),
                remove_padding=bool(_select(config, f"{ref}.model.use_remove_padding", False)),
                gradient_checkpointing=bool(_select(config, f"{ref}.model.enable_gradient_checkpointing", True)),
                dynamic_batch=dynamic,
                update_tokens=update_tokens,
                log_prob_tokens=log_prob_tokens,
                tp=int(_select(config, f"{rollout}.tensor_model_parallel_size", 1)),
                gpu_memory_utilization=float(_select(config, f"{rollout}.gpu_memory_utilization", 0.5)),
                max_num_seqs=int(_select(config, f"{rollout}.max_num_seqs", 256)),
                max_num_batched_tokens=int(_select(config, f"{rollout}.max_num_batched_tokens", 8192)),
                prefix_caching=bool(_select(config, f"{rollout}.enable_prefix_caching", True)),
                sleeps=bool(_select(config, f"{rollout}.free_cache_engine", True)),
                kv_bytes=DTYPE_BYTES[str(_select(config, f"{rollout}.dtype", "bfloat16"))],
                lora=lora,
                gpus_key=gpus_key,
            )
        )
    return settings
