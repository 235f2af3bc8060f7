"""experiments/update_direction.py: one rollout, one update per rate, log-prob changes by advantage sign."""

import json

import pytest
import torch
from script_testkit import loaded_script

from verl_mas.local.config import LocalTrainConfig, config_json
from verl_mas.overrides import apply_overrides

TINY = {
    "env_options": {"size": 4, "wall_ratio": 0.1, "tool_mode": "compact", "max_turns": 2},
    "k": 2,
    "tasks_per_step": 2,
    "warm_start": {"tasks": 4, "epochs": 1},
    "model": {"hidden": 32, "vocab_size": 300},
    "sampling": {"max_new_tokens": 8},
    "progress": False,
}


@pytest.fixture(scope="module")
def direction():
    with loaded_script("experiments/update_direction.py", "update_direction_experiment") as module:
        yield module


def test_a_tiny_rate_moves_next_to_nothing_and_a_large_one_moves_the_samples(direction, tmp_path, monkeypatch):
    # an untrained model's rewards are all alike (zero advantages): give every other sample +1 and the rest -1
    def alternating(samples, grouping, norm_adv_by_std):
        return torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(samples))])

    monkeypatch.setattr(direction, "sample_advantages", alternating)
    saved = tmp_path / "config.json"
    saved.write_text(config_json(apply_overrides(LocalTrainConfig(), TINY)))
    out = tmp_path / "direction.json"
    direction.main([str(saved), "--lr", "1e-12", "0.05", "--tasks", "2", "--out", str(out), "--scratch", str(tmp_path)])
    still, moved = json.loads(out.read_text())["results"]
    for result in (still, moved):
        assert result["sampler_gap"] < 1e-4  # the sampler's log-probs are the trainer's
        for row in result["roles"]:
            assert row["positive"] + row["negative"] <= row["samples"]
    # the same samples both times (same seed, same model): the counts agree
    assert [(r["positive"], r["negative"]) for r in still["roles"]] == [
        (r["positive"], r["negative"]) for r in moved["roles"]
    ]
    changes = [r[key] for r in still["roles"] for key in ("mean_change_positive", "mean_change_negative")]
    assert all(abs(change) < 1e-6 for change in changes if change is not None)  # Adam moves each weight by ~lr
    for row in moved["roles"]:  # the update raises what it rewards relative to what it penalises
        assert row["positive"] and row["negative"]
        assert row["mean_change_positive"] > row["mean_change_negative"] + 1e-3


def test_role_rows_split_by_advantage_sign(direction):
    from verl_mas.sample import Sample

    def sample(role: str) -> Sample:
        return Sample("t", role, 0, 0, "p", (1,), (2,), None, 0.0, 0.0, 0.0, False)

    samples = [sample("a"), sample("a"), sample("a"), sample("b")]
    rows = direction.role_rows(samples, torch.tensor([1.0, -1.0, 0.0, 2.0]), torch.tensor([0.5, -2.0, 9.0, 1.5]))
    assert rows == [
        {
            "role": "a",
            "samples": 3,
            "positive": 1,
            "negative": 1,
            "mean_change_positive": 0.5,
            "mean_change_negative": -2.0,
        },
        {
            "role": "b",
            "samples": 1,
            "positive": 1,
            "negative": 0,
            "mean_change_positive": 1.5,
            "mean_change_negative": None,
        },
    ]  # a zero advantage (the 9.0) is in neither mean
