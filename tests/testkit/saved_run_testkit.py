"""A tiny warm-started model saved to disk, and the config of a run that starts from it: what the research tools that
read a saved run (`research.tools.update_direction`, `research.tools.fixed_tasks`) are tested on; `TINY` also sizes
the research tests' short runs."""

from __future__ import annotations

from pathlib import Path

from verl_mas.local.config import LocalTrainConfig
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


def saved_tiny_model(folder: Path, router: str = "shared") -> LocalTrainConfig:
    """A tiny warm-started model saved to `folder`/model, and a config (output in `folder`) that starts from it."""
    from verl_mas.local.train import LocalRun

    config = apply_overrides(LocalTrainConfig(), TINY | {"router": router, "output_dir": str(folder)})
    run = LocalRun(config, log=lambda line: None)
    model = next(iter(run.models.values()))
    model.save_pretrained(folder / "model")
    run.tokenizer.save_pretrained(str(folder / "model"))
    return apply_overrides(config, {"model": {"path": str(folder / "model")}})
