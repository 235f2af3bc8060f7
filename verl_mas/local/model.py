"""Causal LMs for the local engine: a tiny Llama built from a config (no download) or any HF checkpoint by path."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedModel

from verl_mas.pretrained import prepared_path


def build_tiny_model(
    vocab_size: int,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    max_positions: int = 1024,
    seed: int = 0,
    intermediate: int | None = None,
    pad_token_id: int | None = None,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
) -> LlamaForCausalLM:
    """A randomly initialised float32 Llama; the same arguments and seed give the same weights.

    The global torch RNG is left untouched, so building a model never shifts other seeded streams.
    """
    if hidden % heads:
        raise ValueError(f"model hidden ({hidden}) must be divisible by heads ({heads})")
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate or 4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        attn_implementation="sdpa",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.to(torch.float32)


def load_model(
    path_or_name: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> PreTrainedModel:
    """Load any HF causal LM: a local directory, a hub name already in the local cache, or a registered pretrained
    model's name (`verl_mas.pretrained`)."""
    return AutoModelForCausalLM.from_pretrained(prepared_path(path_or_name), dtype=dtype).to(device)
