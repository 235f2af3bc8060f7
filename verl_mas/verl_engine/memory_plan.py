"""Each GPU's planned peak memory per policy and phase (rollout, old log-probs, update), from a composed config.

Every figure is an estimate from the sizes involved, not a measurement. Per actor worker group, on each of its GPUs
(N of them, FSDP shards over all N; vLLM runs one replica per `tensor_model_parallel_size` GPUs):

- actor state (`model_shape.training_state`), each divided by N: full training holds the parameters at
  `fsdp_config.model_dtype` (fp32 in verl), gradients at the same width and AdamW's two moments in fp32. LoRA holds
  the frozen base at the model width without gradients or moments, and each adapter with both (16 bytes a parameter
  in fp32). verl moves offloaded parameters and optimizer states back to the GPU for the update
  (`verl/workers/engine/base.py`, `BaseEngineCtx._context_switch`), so offload lowers the rollout and log-prob
  phases, never the update;
- gathered units: FSDP unshards the root unit (embeddings, and lm_head when untied) and the current and next
  decoder layer (with its adapters) in the compute dtype (bf16), plus the fp32 gradient of the largest unit that has
  one before reduce-scatter: the root or a layer, or with LoRA one layer's adapters;
- activations of one micro-batch of T tokens with gradient checkpointing: the saved layer inputs,
  layers x hidden x 2 bytes per token, plus one layer recomputed in the backward (`layer_activation_bytes`).
  Without checkpointing every layer keeps that set. LoRA keeps the same: the backward still runs through every layer
  to reach the adapters below (its rank-wide intermediates, under 1% of a layer's, are left out);
- logits: T x vocab x 4 bytes (verl computes log-probs over every token of the micro-batch; bf16 logits and their
  gradient, or one fp32 copy);
- T: with packed batches (`use_remove_padding=true`) the micro-batch token budget
  (`ppo_max_token_len_per_gpu`, `log_prob_max_token_len_per_gpu`). Over padded batches (sdpa,
  `use_remove_padding=false`) verl fills a micro-batch by real tokens (`verl/utils/seqlen_balancing.py`) and then
  pads every sample to the micro-batch's longest: a micro-batch holding one sample at the length cap L and others
  at the mean length m holds 1 + floor((budget - L) / m) samples, so T = that count x L;
- vLLM: `gpu_memory_utilization` x the device during the rollout, holding the weights (2 bytes per parameter and per
  parameter of each adapter slot, over the TP ranks), its profiling activations (max_num_batched_tokens x
  (3 intermediate / TP + 4 hidden) x 2 bytes, plus max_num_seqs x vocab x 4 bytes of sampler logits) and the KV
  cache in the rest. In hybrid mode vLLM sleeps during the log-prob and update phases (`free_cache_engine=true`)
  and holds its whole share otherwise;
- KV cache needed per replica: layers x 2 x kv_heads_per_rank x head_dim x 2 bytes per token, for the sequences in
  flight at the length caps: a (task, role, turn) sends K candidates that share the prompt's blocks (prefix
  caching), so a group needs prompt + K x response tokens; a replica holds at most `max_num_seqs` sequences.

With `mas.lora_per_role` the gradients are counted for every role's adapter, though an update under one adapter
leaves the others without; verl's own never-active adapter and the update's copies of the other adapters are left
out. The two nearly cancel: the plan is within one adapter at 4 bytes a parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from omegaconf import DictConfig

from verl_mas.verl_engine.memory_settings import DEFAULT_MEAN_SAMPLE_TOKENS, PolicySettings, policy_settings
from verl_mas.verl_engine.model_shape import BF16, FP32, GIB, server_weights, training_state


@dataclass(frozen=True)
class Peak:
    """One phase's peak on one GPU, as named parts in bytes."""

    phase: str
    parts: tuple[tuple[str, float], ...]

    @property
    def total(self) -> float:
        return sum(size for _, size in self.parts)


@dataclass(frozen=True)
class KvPlan:
    """One vLLM replica's KV cache: what it can hold and what the configured sequences need."""

    replicas: int
    sequences_per_replica: int
    budget: float  # bytes per GPU left for the KV cache
    needed: float  # bytes per GPU the sequences in flight need at the length caps


@dataclass(frozen=True)
class PlanWarning:
    """A planned peak that does not fit, and the keys that change it."""

    policy: str
    what: str
    keys: tuple[str, ...]
    fatal: bool  # True: an out-of-memory error; False: vLLM preempts (slower, not fatal)

    def line(self) -> str:
        return f"{self.policy}: {self.what}; change {', '.join(self.keys)}"


@dataclass(frozen=True)
class PolicyPlan:
    """One policy's plan: its settings, the attention path, the phases' peaks and its KV cache."""

    settings: PolicySettings
    attention: str
    micro_batch_tokens: int  # the update's micro-batch as computed (padded or packed)
    rollout: Peak
    log_prob: Peak
    update: Peak
    kv: KvPlan


@dataclass(frozen=True)
class MemoryPlan:
    """Every policy's plan on GPUs of `device_bytes`, and what does not fit."""

    device_bytes: float
    policies: tuple[PolicyPlan, ...]
    warnings: tuple[PlanWarning, ...]

    def text(self) -> str:
        """The plan as the doctor prints it: per policy and phase the peak and its parts, then the warnings."""
        lines = [f"memory plan per GPU of {self.device_bytes / GIB:.1f} GiB (estimates; GiB = 2^30 bytes)"]
        for plan in self.policies:
            s = plan.settings
            lines += [
                f"  policy {s.policy} ({', '.join(s.roles)}): {s.model_path}, {s.shape.params / 1e9:.2f}B parameters "
                f"({s.shape_source}), FSDP over {s.gpus} GPU(s), vLLM TP {s.tp} x {plan.kv.replicas} replica(s)",
                f"    attention: {plan.attention}; update micro-batch {plan.micro_batch_tokens} tokens",
            ]
            if s.lora is not None:
                lines.append(
                    f"    LoRA: {s.lora.adapters} adapter(s) of rank {s.lora.rank} on {', '.join(s.lora.targets)}, "
                    f"{s.lora.params(s.shape) / 1e6:.1f}M parameters each, on a frozen base; vLLM holds "
                    f"{s.lora.server_slots} adapter slot(s)"
                )
            for peak in (plan.rollout, plan.log_prob, plan.update):
                parts = ", ".join(f"{name} {size / GIB:.1f}" for name, size in peak.parts if size)
                lines.append(f"    {peak.phase:<9}{peak.total / GIB:6.1f} GiB  ({parts})")
            kv = plan.kv
            lines.append(
                f"    KV cache  {kv.needed / GIB:6.1f} GiB needed for {kv.sequences_per_replica} sequences per replica "
                f"at the length caps, {kv.budget / GIB:.1f} GiB available"
            )
        if self.warnings:
            lines += ["  warnings", *(f"    {w.line()}" for w in self.warnings)]
        else:
            lines.append("  every planned peak fits the device, and the KV cache holds the sequences in flight")
        return "\n".join(lines)


def micro_batch_tokens(budget: int, longest: int, mean: int, packed: bool) -> int:
    """Tokens a dynamic micro-batch computes: the real-token budget when packed; padded, the samples a micro-batch
    holding one sample at `longest` and the rest at `mean` fits in `budget`, each padded to `longest`."""
    if packed:
        return budget
    return (1 + max(budget - longest, 0) // mean) * longest


def plan_policy(s: PolicySettings, device_bytes: float) -> PolicyPlan:
    """One policy's peaks per GPU in each phase, its attention path and its KV cache (the module docstring's terms)."""
    shape, n = s.shape, s.gpus
    longest = s.prompt_tokens + s.response_tokens
    if s.dynamic_batch:
        update_tokens = micro_batch_tokens(s.update_tokens, longest, s.mean_sample_tokens, s.remove_padding)
        log_prob_tokens = micro_batch_tokens(s.log_prob_tokens, longest, s.mean_sample_tokens, s.remove_padding)
    else:  # fixed micro-batches: every sample at the cap, padded or not
        update_tokens, log_prob_tokens = s.update_tokens, s.log_prob_tokens
    state = training_state(shape, s.model_bytes, s.lora)
    params, grads, optimizer = state.params / n, state.grads / n, state.optimizer / n
    if s.lora is None:
        layer_unit, largest_trained_unit = shape.layer_params, max(shape.root_params, shape.layer_params)
    else:  # a layer unit holds its adapters too; only they have gradients
        largest_trained_unit = s.lora.adapters * s.lora.layer_params(shape)
        layer_unit = shape.layer_params + largest_trained_unit
    gathered = (shape.root_params + 2 * layer_unit) * BF16
    gathered_grad = largest_trained_unit * FP32
    layer = shape.layer_activation_bytes
    saved = shape.layers * shape.hidden * BF16 if s.gradient_checkpointing else shape.layers * layer
    recompute = layer if s.gradient_checkpointing else 0
    vllm_share = s.gpu_memory_utilization * device_bytes
    asleep = 0.0 if s.sleeps else vllm_share
    resident_params = 0.0 if s.param_offload else params
    resident_optimizer = 0.0 if s.optimizer_offload else optimizer
    rollout = Peak(
        "rollout",
        (("actor params", resident_params), ("optimizer", resident_optimizer), ("vLLM share", vllm_share)),
    )
    log_prob = Peak(
        "log-prob",
        (
            ("params", params),
            ("optimizer", resident_optimizer),
            ("gathered units", gathered),
            ("activations", log_prob_tokens * layer / 2),  # forward only: no gradients in flight
            ("logits", log_prob_tokens * shape.vocab * FP32),
            ("vLLM asleep", asleep),
        ),
    )
    update = Peak(
        "update",
        (
            ("params", params),
            ("grads", grads),
            ("optimizer", optimizer),
            ("gathered units", gathered + gathered_grad),
            ("activations", update_tokens * (saved + recompute)),
            ("logits", update_tokens * shape.vocab * FP32),
            ("vLLM asleep", asleep),
        ),
    )
    kv = kv_plan(s, device_bytes)
    if s.remove_padding:
        attention = "packed (flash_attention_2, use_remove_padding=true): no padding tokens"
    else:
        attention = (
            f"padded (sdpa, use_remove_padding=false): a micro-batch pads to its longest sample, up to "
            f"{longest} tokens; planned with a mean sample of {s.mean_sample_tokens} tokens"
        )
    return PolicyPlan(s, attention, update_tokens, rollout, log_prob, update, kv)


def kv_plan(s: PolicySettings, device_bytes: float) -> KvPlan:
    """What one replica's KV cache can hold after the weights and profiling activations, and what its sequences in
    flight need at the length caps."""
    shape = s.shape
    replicas = max(s.gpus // s.tp, 1)
    kv_heads_per_rank = math.ceil(shape.kv_heads / s.tp)  # replicated when TP exceeds the KV heads
    per_token = shape.layers * 2 * kv_heads_per_rank * shape.head_dim * s.kv_bytes
    weights = server_weights(shape, s.lora) / s.tp
    profile = s.max_num_batched_tokens * (3 * shape.intermediate / s.tp + 4 * shape.hidden) * BF16
    profile += s.max_num_seqs * shape.vocab * FP32
    budget = s.gpu_memory_utilization * device_bytes - weights - profile
    groups = s.tasks * (len(s.roles) if s.parallel else 1)  # (task, role, turn) groups in flight at once
    sequences = min(math.ceil(groups / replicas) * s.k, s.max_num_seqs)
    if s.prefix_caching:
        tokens = sequences * s.response_tokens + math.ceil(sequences / s.k) * s.prompt_tokens
    else:
        tokens = sequences * (s.prompt_tokens + s.response_tokens)
    return KvPlan(replicas, sequences, budget, tokens * per_token)


def plan_warnings(plan: PolicyPlan, device_bytes: float) -> list[PlanWarning]:
    """Each planned peak over the device, and a KV cache too small for the sequences in flight, with the keys to
    change first."""
    s = plan.settings
    ref = "actor_rollout_ref"
    gpus_key = f"{s.gpus_key} or trainer.nnodes"
    found = []
    padding = () if s.remove_padding else (f"{ref}.model.use_remove_padding=true (with flash-attn)",)
    if plan.update.total > device_bytes:
        found.append(
            PlanWarning(
                s.policy,
                f"the update peaks at {plan.update.total / GIB:.1f} GiB of {device_bytes / GIB:.1f}",
                (*padding, f"{ref}.actor.ppo_max_token_len_per_gpu (lower)", f"{gpus_key} (more GPUs)"),
                fatal=True,
            )
        )
    if plan.log_prob.total > device_bytes:
        found.append(
            PlanWarning(
                s.policy,
                f"the old log-prob pass peaks at {plan.log_prob.total / GIB:.1f} GiB of {device_bytes / GIB:.1f}",
                (*padding, f"{ref}.rollout.log_prob_max_token_len_per_gpu (lower)"),
                fatal=True,
            )
        )
    if plan.rollout.total > device_bytes:
        offload = () if s.optimizer_offload else (f"{ref}.actor.fsdp_config.optimizer_offload=true",)
        found.append(
            PlanWarning(
                s.policy,
                f"the rollout peaks at {plan.rollout.total / GIB:.1f} GiB of {device_bytes / GIB:.1f}",
                (f"{ref}.rollout.gpu_memory_utilization (lower)", *offload, f"{gpus_key} (more GPUs)"),
                fatal=True,
            )
        )
    longest = s.prompt_tokens + s.response_tokens
    for key, budget in (
        ("actor.ppo_max_token_len_per_gpu", s.update_tokens),
        ("rollout.log_prob_max_token_len_per_gpu", s.log_prob_tokens),
    ):
        if s.dynamic_batch and budget < longest:
            found.append(
                PlanWarning(
                    s.policy,
                    f"{ref}.{key}={budget} is below a sample at the length caps ({longest} tokens), which verl "
                    "refuses in the update",
                    (f"{ref}.{key} (at least {longest})", "data.max_prompt_length", "data.max_response_length"),
                    fatal=True,
                )
            )
    kv = plan.kv
    if kv.budget <= 0:
        found.append(
            PlanWarning(
                s.policy,
                "vLLM's share holds no KV cache after the weights",
                (f"{ref}.rollout.gpu_memory_utilization (higher)", f"{ref}.rollout.tensor_model_parallel_size"),
                fatal=True,
            )
        )
    elif kv.needed > kv.budget:
        found.append(
            PlanWarning(
                s.policy,
                f"vLLM preempts: {kv.sequences_per_replica} sequences per replica at the length caps need "
                f"{kv.needed / GIB:.1f} GiB of KV cache, {kv.budget / GIB:.1f} GiB available",
                (
                    f"{ref}.rollout.gpu_memory_utilization (higher, if the rollout peak allows)",
                    f"{ref}.rollout.max_num_seqs (lower)",
                    f"{gpus_key} (more replicas)",
                ),
                fatal=False,
            )
        )
    return found


def plan_memory(
    config: DictConfig, device_gib: float, mean_sample_tokens: int = DEFAULT_MEAN_SAMPLE_TOKENS
) -> MemoryPlan:
    """The memory plan of a composed config (attention keys filled in) on GPUs of `device_gib` GiB each.

    Raises:
        ValueError: a bad device size or mean length, or a model whose shape cannot be found.
    """
    if not device_gib > 0:
        raise ValueError(f"--gpu-memory must be a positive number of GiB, got {device_gib!r}")
    if mean_sample_tokens < 1:
        raise ValueError(f"--mean-sample-tokens must be at least 1, got {mean_sample_tokens!r}")
    device_bytes = device_gib * GIB
    plans = tuple(plan_policy(s, device_bytes) for s in policy_settings(config, mean_sample_tokens))
    warnings = tuple(w for plan in plans for w in plan_warnings(plan, device_bytes))
    return MemoryPlan(device_bytes, plans, warnings)
