"""The PPO policy update of the local engine: verl's clipped policy loss on one policy's samples, with AdamW."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
from verl.workers.config import ActorConfig, PolicyLossConfig

from verl_mas.local.logprob import response_logprobs
from verl_mas.sample import VerlBatchTensors


@dataclass
class UpdateConfig:
    """Optimizer and PPO-loss settings of one policy (defaults: AT-GRPO's clip 0.2, no KL, token-mean, 1 epoch)."""

    lr: float = 1e-6
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    grad_clip: float | None = 1.0  # max global grad norm; None: measure the norm, clip nothing
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None  # None: clip_ratio
    clip_ratio_high: float | None = None  # None: clip_ratio
    clip_ratio_c: float = 3.0  # dual-clip bound for negative advantages
    loss_agg_mode: str = "token-mean"
    policy_loss_mode: str = "vanilla"  # a name in verl's policy-loss registry
    ppo_epochs: int = 1
    mini_batch_size: int | None = None  # samples per optimizer step; None: the whole batch
    micro_batch_size: int | None = None  # samples per forward/backward; None: the whole mini-batch
    use_kl_loss: bool = False
    kl_coef: float = 0.001
    kl_type: str = "low_var_kl"
    temperature: float = 1.0  # the sampler's temperature: log-probs are of softmax(logits / temperature)
    shuffle_seed: int = 0
    betas_field_check: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.ppo_epochs < 1:
            raise ValueError(f"ppo_epochs must be >= 1, got {self.ppo_epochs}")
        for name in ("mini_batch_size", "micro_batch_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        self.betas = (float(self.betas[0]), float(self.betas[1]))
