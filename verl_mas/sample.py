"""Training samples (one generation each) and their conversion to verl's batch tensors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Sample:
    """One candidate generation of one role at one turn of one task: one training sample.

    `reward` is the mixed reward alpha * team_reward + local_reward; `continued` marks the branch
    whose state the episode went on from. `infra_failure` says why the move could not be judged (the sandbox or the
    judge failed, not the model): such a sample is left out of its group's statistics and of the update.
    """

    task_uid: str
    role: str
    turn: int
    branch: int
    policy: str
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None
    team_reward: float
    local_reward: float
    reward: float
    continued: bool
    valid: bool = True
    text: str = ""
    infra_failure: str | None = None

    @property
    def group_key(self) -> tuple[str, str, int]:
        return (self.task_uid, self.role, self.turn)


def trainable(samples: Sequence[Sample]) -> list[Sample]:
    """The samples that train: every one but those the judge could not run (`Sample.infra_failure`)."""
    return [s for s in samples if s.infra_failure is None]


@dataclass
class VerlBatchTensors:
    """Samples laid out as verl expects: left-padded prompts, right-padded responses, per-sample keys."""

    prompts: torch.Tensor  # [N, P] int64, left padded
    responses: torch.Tensor  # [N, R] int64, right padded
    input_ids: torch.Tensor  # [N, P + R]
    attention_mask: torch.Tensor  # [N, P + R]
    response_mask: torch.Tensor  # [N, R] float32
    token_level_rewards: torch.Tensor  # [N, R] float32, reward on the last response token
    old_log_probs: torch.Tensor | None  # [N, R] float32 sampler log-probs, when every sample has them
    uid: np.ndarray  # [N] object: task uid
    role: np.ndarray  # [N] object
    turn: np.ndarray  # [N] int64
    policy: np.ndarray  # [N] object


def samples_to_tensors(samples: Sequence[Sample], pad_token_id: int) -> VerlBatchTensors:
    """Stack samples into padded tensors.

    A sample with an empty response still carries its reward (at position 0, with a zero mask), so
    that it counts in its group's statistics exactly as verl counts the sum of token rewards.
    """
    if not samples:
        raise ValueError("samples_to_tensors: no samples")
    n = len(samples)
    prompt_len = max(1, max(len(s.prompt_ids) for s in samples))
    response_len = max(1, max(len(s.response_ids) for s in samples))
    prompts = torch.full((n, prompt_len), pad_token_id, dtype=torch.long)
    responses = torch.full((n, response_len), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((n, prompt_len), dtype=torch.long)
    response_mask = torch.zeros((n, response_len), dtype=torch.float32)
    rewards = torch.zeros((n, response_len), dtype=torch.float32)
    have_logprobs = all(s.logprobs is not None for s in samples)
    old_log_probs = torch.zeros((n, response_len), dtype=torch.float32) if have_logprobs else None
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        if p:
            prompts[i, prompt_len - p :] = torch.tensor(s.prompt_ids, dtype=torch.long)
            prompt_mask[i, prompt_len - p :] = 1
        if r:
            responses[i, :r] = torch.tensor(s.response_ids, dtype=torch.long)
            response_mask[i, :r] = 1.0
        rewards[i, max(r - 1, 0)] = s.reward
        if old_log_probs is not None and r:
            if len(s.logprobs) != r:
                raise ValueError(f"sample {i} ({s.group_key}): {len(s.logprobs)} log-probs for {r} response tokens")
            old_log_probs[i, :r] = torch.tensor(s.logprobs, dtype=torch.float32)
    attention_mask = torch.cat([prompt_mask, response_mask.long()], dim=1)
    return VerlBatchTensors(
        prompts=prompts,
        responses=responses,
        input_ids=torch.cat([prompts, responses], dim=1),
        attention_mask=attention_mask,
        response_mask=response_mask,
        token_level_rewards=rewards,
        old_log_probs=old_log_probs,
        uid=np.array([s.task_uid for s in samples], dtype=object),
        role=np.array([s.role for s in samples], dtype=object),
        turn=np.array([s.turn for s in samples], dtype=np.int64),
        policy=np.array([s.policy for s in samples], dtype=object),
    )
