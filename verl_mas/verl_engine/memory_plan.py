"""Each GPU's planned peak memory per policy and phase (rollout, old log-probs, update), from a composed config.

Every figure is an estimate from the sizes involved, not a measurement. Per policy, on each of its GPUs (N of
them, FSDP shards over all N; vLLM runs one replica per `tensor_model_parallel_size` GPUs):

- actor state: parameters at `fsdp_config.model_dtype` (fp32 in verl), gradients at the same width, AdamW's two
  moments in fp32, each divided by N. verl moves offloaded parameters and optimizer states back to the GPU for the
  update (`verl/workers/engine/base.py`, `BaseEngineCtx._context_switch`), so offload lowers the rollout and
  log-prob phases, never the update;
- gathered units: FSDP unshards the root unit (embeddings, and lm_head when untied) and the current and next
  decoder layer in the compute dtype (bf16), plus the fp32 gradient of the largest of them before reduce-scatter;
- activations of one micro-batch of T tokens with gradient checkpointing: the saved layer inputs,
  layers x hidden x 2 bytes per token, plus one layer recomputed in the backward,
  2 x (4 hidden + 3 q + 3 kv + 4 intermediate) x 2 bytes per token (norm inputs and outputs, q/k/v before and
  after rotary, the attention output, the MLP's gate, up, activation and product, in bf16; doubled for the
  gradients in flight). Without checkpointing every layer keeps that set;
- logits: T x vocab x 4 bytes (verl computes log-probs over every token of the micro-batch; bf16 logits and their
  gradient, or one fp32 copy);
- T: with packed batches (`use_remove_padding=true`) the micro-batch token budget
  (`ppo_max_token_len_per_gpu`, `log_prob_max_token_len_per_gpu`). Over padded batches (sdpa,
  `use_remove_padding=false`) verl fills a micro-batch by real tokens (`verl/utils/seqlen_balancing.py`) and then
  pads every sample to the micro-batch's longest: a micro-batch holding one sample at the length cap L and others
  at the mean length m holds 1 + floor((budget - L) / m) samples, so T = that count x L;
- vLLM: `gpu_memory_utilization` x the device during the rollout, holding the weights (2 bytes per parameter over
  the TP ranks), its profiling activations (max_num_batched_tokens x (3 intermediate / TP + 4 hidden) x 2 bytes,
  plus max_num_seqs x vocab x 4 bytes of sampler logits) and the KV cache in the rest. In hybrid mode vLLM sleeps
  during the log-prob and update phases (`free_cache_engine=true`) and holds its whole share otherwise;
- KV cache needed per replica: layers x 2 x kv_heads_per_rank x head_dim x 2 bytes per token, for the sequences in
  flight at the length caps: a (task, role, turn) sends K candidates that share the prompt's blocks (prefix
  caching), so a group needs prompt + K x response tokens; a replica holds at most `max_num_seqs` sequences.

Beside the plan, `lora_layout` compares the two ways of training one LoRA adapter per role: one base model with every
role's adapter (`mas.lora_per_role`) against one LoRA policy, base included, per role.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

GIB = 1024**3
BF16 = 2
FP32 = 4
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
ADAM_BYTES = 2 * FP32  # AdamW's first and second moments, fp32
DEFAULT_MEAN_SAMPLE_TOKENS = 1024  # a 300-600 token prompt and a few-hundred-token answer (docs/gpu.md)


@dataclass(frozen=True)
class ModelShape:
    """The architecture numbers of a dense decoder (Qwen3-style: q/k norms, no attention bias, SwiGLU MLP)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool

    @property
    def layer_params(self) -> int:
        """One decoder layer: q, k, v, o projections, q/k norms, the gated MLP, two RMSNorms."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = self.hidden * q + 2 * self.hidden * kv + q * self.hidden + 2 * self.head_dim  # + q/k norms
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden  # MLP, two RMSNorms

    @property
    def root_params(self) -> int:
        """Embeddings, lm_head when untied, final norm: FSDP's root unit."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.root_params

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any]) -> ModelShape:
        heads = int(hf["num_attention_heads"])
        return cls(
            hidden=int(hf["hidden_size"]),
            layers=int(hf["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(hf.get("num_key_value_heads") or heads),
            head_dim=int(hf.get("head_dim") or hf["hidden_size"] // heads),
            intermediate=int(hf["intermediate_size"]),
            vocab=int(hf["vocab_size"]),
            tied=bool(hf.get("tie_word_embeddings", False)),
        )


# The models the recipes name, from their config.json on the Hugging Face hub.
KNOWN_SHAPES = {
    "Qwen/Qwen3-1.7B": ModelShape(2048, 28, 16, 8, 128, 6144, 151936, tied=True),
    "Qwen/Qwen3-8B": ModelShape(4096, 36, 32, 8, 128, 12288, 151936, tied=False),
}


def model_shape(path: str) -> tuple[ModelShape, str]:
    """The shape of the model at `path` and where it came from: its config.json (a local folder, or the Hugging
    Face cache for a hub id), else the table of the recipes' models.

    Raises:
        ValueError: neither is available, naming the path.
    """
    local = Path(path).expanduser() / "config.json"
    found: Path | None = local if local.is_file() else None
    if found is None and "/" in path and not Path(path).expanduser().exists():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(path, "config.json")
            found = Path(cached) if isinstance(cached, str) else None
        except Exception:  # noqa: BLE001  (no cache or a malformed id: fall back to the table)
            found = None
    if found is not None:
        hf = json.loads(found.read_text(encoding="utf-8"))
        return ModelShape.from_hf_config(hf.get("text_config", hf)), str(found)
    if path in KNOWN_SHAPES:
        return KNOWN_SHAPES[path], "verl-mas's table of the recipes' models"
    raise ValueError(
        f"model {path!r}: no readable config.json, and not one of {sorted(KNOWN_SHAPES)}; give a local model folder"
    )


@dataclass(frozen=True)
class PolicySettings:
    """What the plan of one policy reads from the composed config."""

    policy: str
    model_path: str
    shape: ModelShape
    shape_source: str
    gpus: int
    roles: tuple[str, ...]  # the roles this policy serves
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


def _select(config: DictConfig, key: str, default: Any = None) -> Any:
    value = OmegaConf.select(config, key, default=default)
    return default if value is None else value


def policy_settings(config: DictConfig, mean_sample_tokens: int = DEFAULT_MEAN_SAMPLE_TOKENS) -> list[PolicySettings]:
    """Every policy's settings from a composed config whose attention keys are filled in (`fill_attention`)."""
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
    settings = []
    for policy, policy_config in mas.policy_settings().items():
        path = policy_config.model_path or str(config.actor_rollout_ref.model.path)
        shape, source = model_shape(path)
        roles = tuple(role for role, served_by in router.role_to_policy if served_by == policy)
        settings.append(
            PolicySettings(
                policy=policy,
                model_path=path,
                shape=shape,
                shape_source=source,
                gpus=gpus[policy] * nodes[policy],
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
            )
        )
    return settings


def micro_batch_tokens(budget: int, longest: int, mean: int, packed: bool) -> int:
    """Tokens a dynamic micro-batch computes: the real-token budget when packed; padded, the samples a micro-batch
    holding one sample at `longest` and the rest at `mean` fits in `budget`, each padded to `longest`."""
    if packed:
        return budget
    return (1 + max(budget - longest, 0) // mean) * longest


def _layer_activation_bytes(shape: ModelShape) -> int:
    """One decoder layer's activations per token in a backward (see the module docstring), bf16."""
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    return 2 * (4 * shape.hidden + 3 * q + 3 * kv + 4 * shape.intermediate) * BF16


def plan_policy(s: PolicySettings, device_bytes: float) -> PolicyPlan:
    """One policy's peaks per GPU in each phase, its attention path and its KV cache (the module docstring's terms)."""
    shape, n = s.shape, s.gpus
    longest = s.prompt_tokens + s.response_tokens
    if s.dynamic_batch:
        update_tokens = micro_batch_tokens(s.update_tokens, longest, s.mean_sample_tokens, s.remove_padding)
        log_prob_tokens = micro_batch_tokens(s.log_prob_tokens, longest, s.mean_sample_tokens, s.remove_padding)
    else:  # fixed micro-batches: every sample at the cap, padded or not
        update_tokens, log_prob_tokens = s.update_tokens, s.log_prob_tokens
    params = shape.params * s.model_bytes / n
    grads = shape.params * s.model_bytes / n
    optimizer = shape.params * ADAM_BYTES / n
    gathered = (shape.root_params + 2 * shape.layer_params) * BF16
    gathered_grad = max(shape.root_params, shape.layer_params) * FP32
    layer = _layer_activation_bytes(shape)
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
    weights = shape.params * BF16 / s.tp
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
    gpus_key = "trainer.n_gpus_per_node" if s.policy == "shared" else f"mas.policies.{s.policy}.n_gpus_per_node"
    gpus_key += " or trainer.nnodes"
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


def lora_params(shape: ModelShape, rank: int) -> int:
    """One LoRA adapter of `rank` on every linear layer of the decoder (peft's `all-linear`: q, k, v, o, gate, up and
    down in each layer, not lm_head): rank x (inputs + outputs) per linear layer."""
    h, q, kv, i = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.intermediate
    per_layer = (h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h)  # q, k and v, o, gate and up, down
    return shape.layers * rank * per_layer


@dataclass(frozen=True)
class LoraLayout:
    """The weights and training state of `roles` LoRA adapters in bytes, summed over every GPU that holds them."""

    workers: int  # the actor workers: the base at the model width, each adapter's parameters, gradients, AdamW
    servers: int  # the vLLM servers: the base in bf16, one bf16 slot per adapter the server can hold


def lora_layout(shape: ModelShape, rank: int, roles: int, one_base: bool, model_bytes: int = FP32) -> LoraLayout:
    """`one_base` (`mas.lora_per_role`): one worker group holds the base once and `roles` adapters, one server holds
    the base once and `roles` + 1 adapter slots (verl's own synced adapter beside the roles'). Otherwise (one LoRA
    policy per role) `roles` worker groups and servers, each with a copy of the base and one adapter. Activations,
    logits and the KV cache are left out: they follow the tokens, not the layout."""
    base, adapter = shape.params, lora_params(shape, rank)
    trained = adapter * (2 * model_bytes + ADAM_BYTES)  # parameters, gradients, AdamW's two moments
    if one_base:
        return LoraLayout(base * model_bytes + roles * trained, (base + (roles + 1) * adapter) * BF16)
    return LoraLayout(roles * (base * model_bytes + trained), roles * (base + adapter) * BF16)
