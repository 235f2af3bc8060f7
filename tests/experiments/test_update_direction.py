"""experiments/update_direction.py: one rollout, one update per rate, log-prob changes by advantage sign."""

import dataclasses
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


def saved_tiny_model(folder, router: str):
    """A tiny warm-started model saved to `folder`, and a config that starts from it."""
    from verl_mas.local.train import LocalRun

    config = apply_overrides(LocalTrainConfig(), TINY | {"router": router, "output_dir": str(folder)})
    run = LocalRun(config, log=lambda line: None)
    model = next(iter(run.models.values()))
    model.save_pretrained(folder / "model")
    run.tokenizer.save_pretrained(str(folder / "model"))
    return apply_overrides(config, {"model": {"path": str(folder / "model")}})


@pytest.mark.parametrize("router", ["shared", "per_role"])
def test_a_tiny_rate_moves_next_to_nothing_and_a_large_one_moves_the_samples(direction, tmp_path, monkeypatch, router):
    config = saved_tiny_model(tmp_path, router)
    saved = tmp_path / "config.json"
    saved.write_text(config_json(dataclasses.replace(config, norm_adv_by_std=False)))
    asked = []

    # an untrained model's rewards are all alike (zero advantages): give every other sample +1 and the rest -1
    def alternating(samples, grouping, norm_adv_by_std):
        asked.append(norm_adv_by_std)
        return torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(samples))])

    monkeypatch.setattr(direction, "sample_advantages", alternating)
    out = tmp_path / "direction.json"
    direction.main([str(saved), "--lr", "1e-12", "0.05", "--tasks", "2", "--out", str(out)])
    assert asked == [False]  # one rollout, scored as the saved config says
    still, moved = json.loads(out.read_text())["results"]
    assert still["sampler_gap"] < 1e-4  # the sampler's log-probs are the trainer's
    assert len(moved["roles"]) == 2  # plan and tool, on one model or two
    for row in still["roles"]:
        assert abs(row["mean_change_positive"]) < 1e-6 and abs(row["mean_change_negative"]) < 1e-6
    for row in moved["roles"]:  # the update raises what it rewards relative to what it penalises
        assert row["positive"] and row["negative"]
        assert row["mean_change_positive"] > row["mean_change_negative"] + 1e-3


def test_a_config_without_a_saved_model_is_refused(direction, tmp_path):
    saved = tmp_path / "config.json"
    saved.write_text(config_json(apply_overrides(LocalTrainConfig(), TINY)))
    with pytest.raises(ValueError, match="model.path is empty"):
        direction.updates(saved, [1e-3], 2)


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
