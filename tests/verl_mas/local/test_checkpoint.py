"""Checkpoints: atomic layout, latest_checkpoint, and exact resume of training driven by the global RNGs."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaForCausalLM

from verl_mas.advantage import compute_at_grpo_advantage
from verl_mas.local.checkpoint import is_checkpoint, latest_checkpoint, load_checkpoint, save_checkpoint
from verl_mas.local.model import build_tiny_model
from verl_mas.local.update import PolicyTrainer, UpdateConfig
from verl_mas.sample import Sample, VerlBatchTensors, samples_to_tensors

POLICIES = ("coder", "tester")


def tiny_model(seed: int) -> LlamaForCausalLM:
    return build_tiny_model(vocab_size=64, hidden=32, layers=2, heads=4, max_positions=128, seed=seed, intermediate=64)


def random_batch(policy: str) -> tuple[VerlBatchTensors, torch.Tensor]:
    """Two groups of 3 samples drawn from all three global RNGs, so that resuming must restore each of them."""
    samples = []
    for task in range(2):
        prompt = torch.randint(1, 64, (random.randint(2, 5),)).tolist()
        for branch in range(3):
            response = torch.randint(1, 64, (random.randint(1, 4),)).tolist()
            reward = float(np.random.rand())
            samples.append(
                Sample(
                    f"task{task}",
                    policy,
                    0,
                    branch,
                    policy,
                    tuple(prompt),
                    tuple(response),
                    None,
                    reward,
                    0.0,
                    reward,
                    False,
                )
            )
    tensors = samples_to_tensors(samples, pad_token_id=0)
    advantages, _ = compute_at_grpo_advantage(
        tensors.token_level_rewards, tensors.response_mask, tensors.uid, role=tensors.role, turn=tensors.turn
    )
    return tensors, advantages


def train(trainers: dict[str, PolicyTrainer], steps: int) -> None:
    for _ in range(steps):
        for policy, trainer in trainers.items():
            trainer.step(*random_batch(policy))


def full_models(seed: int) -> tuple[dict[str, torch.nn.Module], dict[str, PolicyTrainer]]:
    """One whole model per policy, with shuffled mini-batches and micro-batch accumulation."""
    config = UpdateConfig(lr=1e-2, mini_batch_size=4, micro_batch_size=2, shuffle_seed=seed)
    models = {policy: tiny_model(seed + i) for i, policy in enumerate(POLICIES)}
    return models, {policy: PolicyTrainer(models[policy], config) for policy in POLICIES}


def lora_models(seed: int) -> tuple[dict[str, torch.nn.Module], dict[str, PolicyTrainer]]:
    """One base model with one LoRA adapter per policy."""
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = get_peft_model(tiny_model(seed), lora, adapter_name=POLICIES[0])
        model.add_adapter(POLICIES[1], lora)
    config = UpdateConfig(lr=1e-2, mini_batch_size=4, shuffle_seed=seed)
    return {"base": model}, {policy: PolicyTrainer(model, config, adapter_name=policy) for policy in POLICIES}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def parameters(models: dict[str, torch.nn.Module]) -> dict[str, torch.Tensor]:
    return {
        f"{key}/{name}": p.detach().clone() for key, model in models.items() for name, p in model.named_parameters()
    }


@pytest.mark.parametrize("build", [full_models, lora_models], ids=["full", "lora"])
def test_resume_continues_exactly(tmp_path: Path, build) -> None:
    seed_everything(0)
    models, trainers = build(0)
    train(trainers, 4)
    uninterrupted = parameters(models)

    seed_everything(0)
    models, trainers = build(0)
    train(trainers, 2)
    save_checkpoint(tmp_path, 2, models, trainers, extra={"data_cursor": 12})
    seed_everything(123)  # a fresh process: other weights, other RNG streams, until the checkpoint is loaded
    models, trainers = build(7)
    loaded = load_checkpoint(latest_checkpoint(tmp_path), models, trainers)
    assert loaded.step == 2 and loaded.extra == {"data_cursor": 12}
    train(trainers, 2)
    resumed = parameters(models)

    assert resumed.keys() == uninterrupted.keys()
    for name, value in uninterrupted.items():
        assert torch.equal(resumed[name], value), name
    assert all(trainer.optimizer_steps == 4 * 2 for trainer in trainers.values())  # 4 steps x 2 mini-batches


def test_latest_checkpoint_skips_unfinished_directories(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path / "missing") is None
    models, trainers = full_models(0)
    save_checkpoint(tmp_path, 3, models, trainers)
    save_checkpoint(tmp_path, 10, models, trainers)
    (tmp_path / "step_00000020").mkdir()  # a crash before the rename leaves no meta.json in a step dir
    (tmp_path / ".tmp_step_00000030_1").mkdir()
    assert latest_checkpoint(tmp_path) == tmp_path / "step_00000010"
    save_checkpoint(tmp_path, 10, models, trainers)  # re-saving a step replaces it
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "step_00000003",
        "step_00000010",
        "step_00000020",
    ]


def test_load_rejects_other_names(tmp_path: Path) -> None:
    models, trainers = full_models(0)
    path = save_checkpoint(tmp_path, 1, models, trainers)
    with pytest.raises(ValueError, match="trainers"):
        load_checkpoint(path, models, {"coder": trainers["coder"]})


def test_caller_files_are_part_of_the_atomic_checkpoint(tmp_path: Path) -> None:
    models, trainers = full_models(0)
    path = save_checkpoint(tmp_path, 1, models, trainers, write_files=lambda d: (d / "note.txt").write_text("x"))
    assert (path / "note.txt").read_text() == "x" and is_checkpoint(path)

    def fail(folder: Path) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, 2, models, trainers, write_files=fail)
    assert latest_checkpoint(tmp_path) == path and not is_checkpoint(tmp_path / "step_00000002")
