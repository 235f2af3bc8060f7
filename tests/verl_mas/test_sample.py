"""Tests of laying samples out as verl's padded tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl_mas.advantage import compute_at_grpo_advantage
from verl_mas.sample import Sample, samples_to_tensors


def make_sample(uid, role, turn, branch, prompt, response, reward, logprobs=None):
    return Sample(
        task_uid=uid,
        role=role,
        turn=turn,
        branch=branch,
        policy="p",
        prompt_ids=tuple(prompt),
        response_ids=tuple(response),
        logprobs=None if logprobs is None else tuple(logprobs),
        team_reward=reward,
        local_reward=0.0,
        reward=reward,
        continued=branch == 0,
    )


def test_padding_masks_and_reward_on_last_response_token():
    samples = [
        make_sample("t0", "a", 0, 0, [5, 6, 7], [8, 9], 1.5, [-0.1, -0.2]),
        make_sample("t0", "a", 0, 1, [5], [10, 11, 12], -0.5, [-0.3, -0.4, -0.5]),
    ]
    out = samples_to_tensors(samples, pad_token_id=0)
    assert out.prompts.tolist() == [[5, 6, 7], [0, 0, 5]]
    assert out.responses.tolist() == [[8, 9, 0], [10, 11, 12]]
    assert out.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert out.response_mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    assert out.token_level_rewards.tolist() == [[0, 1.5, 0], [0, 0, -0.5]]
    assert out.old_log_probs[0].tolist() == pytest.approx([-0.1, -0.2, 0.0])
    assert out.input_ids.shape == (2, 6)
    assert list(out.uid) == ["t0", "t0"] and out.turn.dtype == np.int64


def test_empty_response_keeps_its_reward_in_the_group():
    samples = [make_sample("t", "a", 0, 0, [1], [], 1.0), make_sample("t", "a", 0, 1, [1], [4], 3.0)]
    out = samples_to_tensors(samples, pad_token_id=0)
    assert out.response_mask[0].sum() == 0 and out.token_level_rewards[0, 0] == 1.0
    adv, _ = compute_at_grpo_advantage(
        out.token_level_rewards, out.response_mask, out.uid, role=out.role, turn=out.turn
    )
    # mean 2, std sqrt(2): the empty sample still pulls the group mean; its own advantage is masked away
    assert adv[1, 0].item() == pytest.approx(1 / np.sqrt(2), rel=1e-5)
    assert adv[0].abs().sum().item() == 0


def test_missing_logprobs_drop_the_column_and_mismatched_ones_fail():
    assert samples_to_tensors([make_sample("t", "a", 0, 0, [1], [2], 0.0)], 0).old_log_probs is None
    with pytest.raises(ValueError, match="1 log-probs for 2 response tokens"):
        samples_to_tensors([make_sample("t", "a", 0, 0, [1], [2, 3], 0.0, [-1.0])], 0)
    with pytest.raises(ValueError, match="no samples"):
        samples_to_tensors([], 0)


def test_prompt_and_response_tokens_round_trip():
    samples = [make_sample("t", "a", 0, i, list(range(1, 2 + i)), list(range(20, 20 + 3 - i)), 0.0) for i in range(3)]
    out = samples_to_tensors(samples, pad_token_id=0)
    for i, s in enumerate(samples):
        row_prompt = out.prompts[i][out.attention_mask[i, : out.prompts.shape[1]].bool()].tolist()
        row_response = out.responses[i][out.response_mask[i].bool()].tolist()
        assert tuple(row_prompt) == s.prompt_ids and tuple(row_response) == s.response_ids
    assert torch.all(out.input_ids[:, : out.prompts.shape[1]] == out.prompts)
