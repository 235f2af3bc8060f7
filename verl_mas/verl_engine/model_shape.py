"""A decoder's architecture numbers and the sizes that follow from them: parameters, LoRA adapters, activations per
token, and the training state of full or LoRA training (the memory plan's building blocks)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1024**3
BF16 = 2
FP32 = 4
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
ADAM_BYTES = 2 * FP32  # AdamW's first and second moments, fp32
# The linear layers of a decoder layer that peft's `all-linear` (verl's default `target_modules`) adapts; not lm_head.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


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

    @property
    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(inputs, outputs) of each linear layer of a decoder layer, by its name in the model."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {
            "q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h),
        }  # fmt: skip

    @property
    def layer_activation_bytes(self) -> int:
        """One decoder layer's activations per token in a backward, bf16: norm inputs and outputs, q/k/v before and
        after rotary, the attention output, the MLP's gate, up, activation and product, doubled for the gradients in
        flight: 2 x (4 hidden + 3 q + 3 kv + 4 intermediate) x 2 bytes."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return 2 * (4 * self.hidden + 3 * q + 3 * kv + 4 * self.intermediate) * BF16

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


def model_shape(path: str, key: str = "actor_rollout_ref.model.path") -> tuple[ModelShape, str]:
    """The shape of the model at `path` (the value of the config's `key`) and where it came from: its config.json
    (a local folder, or the Hugging Face cache for a hub id), else the table of the recipes' models.

    Raises:
        ValueError: neither is available, naming the key, its value and how to set it.
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
        f"{key}={path!r}: no readable config.json there, and not one of {sorted(KNOWN_SHAPES)}; set {key} to a "
        f"local model folder or one of those, as a hydra override on the command line (e.g. {key}=Qwen/Qwen3-8B)"
    )


@dataclass(frozen=True)
class Lora:
    """The LoRA adapters one actor worker group trains on its frozen base model."""

    rank: int
    adapters: int = 1  # trained adapters: 1 for a LoRA policy, one per role with `mas.lora_per_role`
    server_slots: int = 1  # adapters each vLLM replica allocates at start (`max_loras`)
    targets: tuple[str, ...] = LORA_TARGETS

    def layer_params(self, shape: ModelShape) -> int:
        """One adapter's parameters in one decoder layer: rank x (inputs + outputs) per adapted linear layer."""
        return self.rank * sum(sum(shape.linear_shapes[name]) for name in self.targets)

    def params(self, shape: ModelShape) -> int:
        """One adapter's parameters."""
        return shape.layers * self.layer_params(shape)


@dataclass(frozen=True)
class TrainingState:
    """An actor's weights and training state in bytes, summed over the GPUs that shard it."""

    params: float  # every parameter at the model width (trained or frozen)
    grads: float  # the trained parameters' gradients, at the model width
    optimizer: float  # AdamW's two fp32 moments of the trained parameters

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer


def training_state(shape: ModelShape, model_bytes: int, lora: Lora | None = None) -> TrainingState:
    """Full training (`lora` None): every parameter with a gradient and AdamW's moments, 4 + 4 + 8 bytes in fp32.
    LoRA: the frozen base at the model width without gradient or moments (verl loads the trained model at
    `fsdp_config.model_dtype`, fp32 by default, and casts the adapters to it), each adapter with both."""
    if lora is None:
        return TrainingState(shape.params * model_bytes, shape.params * model_bytes, shape.params * ADAM_BYTES)
    trained = lora.adapters * lora.params(shape)
    return TrainingState((shape.params + trained) * model_bytes, trained * model_bytes, trained * ADAM_BYTES)


def server_weights(shape: ModelShape, lora: Lora | None = None) -> float:
    """A vLLM replica's weights over its TP ranks together: the base in bf16 and one bf16 slot per adapter."""
    slots = lora.server_slots * lora.params(shape) if lora is not None else 0
    return (shape.params + slots) * BF16


@dataclass(frozen=True)
class LoraLayout:
    """The weights and training state of `roles` LoRA adapters in bytes, summed over every GPU that holds them."""

    workers: float  # the actor workers: the base at the model width, each adapter's parameters, gradients, AdamW
    servers: float  # the vLLM servers: the base in bf16, one bf16 slot per adapter the server can hold


def lora_layout(shape: ModelShape, rank: int, roles: int, one_base: bool, model_bytes: int = FP32) -> LoraLayout:
    """`one_base` (`mas.lora_per_role`): one worker group holds the base once and `roles` adapters, one server holds
    the base once and `roles` + 1 adapter slots (verl's own synced adapter beside the roles'). Otherwise (one LoRA
    policy per role) `roles` worker groups and servers, each with a copy of the base and one adapter. Activations,
    logits and the KV cache are left out: they follow the tokens, not the layout."""
    if one_base:
        lora = Lora(rank, adapters=roles, server_slots=roles + 1)
        return LoraLayout(training_state(shape, model_bytes, lora).total, server_weights(shape, lora))
    lora = Lora(rank)
    return LoraLayout(roles * training_state(shape, model_bytes, lora).total, roles * server_weights(shape, lora))
