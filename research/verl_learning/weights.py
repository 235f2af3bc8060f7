"""Both engines' checkpoints as state dicts, verl's L2 tree as the local LoRA model, and the held-out evaluator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.train import LocalRun, make_tasks

VERL_ADAPTER = "default"  # verl's own adapter in a mas.lora_per_role checkpoint: frozen, never active


def local_checkpoints(folder: Path) -> dict[int, dict[str, dict]]:
    """{step: {policy: state dict}} of a local run's checkpoints."""
    found = {}
    for step_dir in sorted(folder.glob("step_*")):
        meta = json.loads((step_dir / "meta.json").read_text())
        found[meta["step"]] = {p: torch.load(step_dir / f"model_{p}.pt", map_location="cpu") for p in meta["models"]}
    return found


def lora_owner(name: str) -> str | None:
    """The adapter a peft weight name belongs to (`...lora_A.<adapter>.weight`), None for a base weight."""
    parts = name.split(".")
    return next((parts[i + 1] for i, part in enumerate(parts[:-1]) if part in ("lora_A", "lora_B")), None)


def role_adapters_state(state: dict[str, torch.Tensor], adapters: list[str]) -> dict[str, torch.Tensor]:
    """A verl `mas.lora_per_role` checkpoint's weights as the local engine's LoRA model holds them: the base and each
    role's adapter under the same peft names, verl's own adapter (`default`, never active) left out. Raises when an
    adapter of `adapters` is missing or the checkpoint holds one the local model does not."""
    found = {lora_owner(name) for name in state} - {None, VERL_ADAPTER}
    if found != set(adapters):
        raise ValueError(f"the checkpoint holds adapters {sorted(found)}, the local model {sorted(adapters)}")
    return {name: tensor for name, tensor in state.items() if lora_owner(name) != VERL_ADAPTER}


def base_change(state: dict[str, torch.Tensor], start: dict[str, torch.Tensor]) -> float:
    """The largest |weight - start| over the base weights (every weight no adapter owns) both hold."""
    names = [name for name in state if lora_owner(name) is None and name in start]
    return max(float((state[name] - start[name]).abs().max()) for name in names)


def verl_checkpoints(folder: Path, policies: list[str]) -> dict[int, dict[str, dict]]:
    """{step: {policy: state dict}} of a verl run's FSDP2 checkpoints (world size 1: each shard is the tensor)."""
    roots = {p: folder if len(policies) == 1 else folder / p for p in policies}
    steps = sorted(int(d.name.split("_")[-1]) for d in roots[policies[0]].glob("global_step_*"))
    found = {}
    for step in steps:
        found[step] = {}
        for policy, root in roots.items():
            shard = root / f"global_step_{step}" / "actor" / "model_world_size_1_rank_0.pt"
            state = torch.load(shard, map_location="cpu", weights_only=False)
            found[step][policy] = {k: (t.to_local() if hasattr(t, "to_local") else t) for k, t in state.items()}
    return found


class Evaluator:
    """Held-out success per board of any weights: greedy (K = 1) and `samples` episodes sampled at the training
    temperature, with the same random numbers at every call."""

    def __init__(self, config: LocalTrainConfig, samples: int) -> None:
        self.run = LocalRun(config, log=lambda _: None)
        self.tasks = make_tasks(config, "eval", 0, config.eval_tasks)
        self.samples = samples

    def __call__(self, weights: dict[str, dict]) -> dict[str, list[float]]:
        for policy, state in weights.items():
            self.run.models[policy].load_state_dict(state)
        greedy = self.run.rollout(self.tasks, self.run.evaluator, 1, "tree")
        self.run.sampled_evaluator.set_rng_state(self.run.sampled_evaluator_start)
        sampled = self.run.rollout(self.tasks, self.run.sampled_evaluator, self.samples, "independent")
        solved = np.array([r.success for r in sampled], dtype=float).reshape(len(self.tasks), self.samples)
        return {"greedy": [float(r.success) for r in greedy], "sampled": solved.mean(axis=1).tolist()}
