"""Can the update climb the reward it is given? Training on the same tasks at every step, where any working update must.

From a run's saved config (its `model.path`: a saved model), `--steps` training steps of the config's kind (its
K, grouping, rewards), each on the **same** `--tasks` training tasks (with `--fresh`, the next tasks each step, as
training does), at each `--lr`. Per step it records training success, each role's first-turn local reward and the
unreadable share. With `--advantages negated` or `shuffled` the update gets the advantages with their sign flipped or
shuffled across the step's samples: if those fall as fast as the real ones, the update's direction does not matter
at that rate and its noise decides.

    python -m research.tools.fixed_tasks runs/code_t2_long/code/seed2/single_grpo/config.json \\
        --lr 3e-4 1e-4 --steps 150 --out research/tools/data/fixed_tasks.json
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch

from research.tools.probe import check_rates, probe_parser, write_results
from verl_mas.env import Task
from verl_mas.local.config import LocalTrainConfig, read_config
from verl_mas.local.train import LocalRun
from verl_mas.sample import Sample

AdvantageMode = Literal["computed", "negated", "shuffled"]
ADVANTAGE_MODES: tuple[AdvantageMode, ...] = ("computed", "negated", "shuffled")
BLOCK = 5  # steps averaged at each end of a run
MODULE = "research.tools.fixed_tasks"


class FixedTasksRun(LocalRun):
    """A `LocalRun` whose every step trains on the same tasks (unless `fresh`), with its advantages as `mode` says."""

    def __init__(self, config: LocalTrainConfig, fresh: bool, mode: AdvantageMode) -> None:
        super().__init__(config, log=lambda _: None)
        self.fresh = fresh
        self.mode = mode
        self.shuffler = torch.Generator().manual_seed(config.seed)

    def train_tasks(self, step: int) -> list[Task]:
        return super().train_tasks(step if self.fresh else 0)

    def compute_advantages(self, samples: list[Sample]) -> torch.Tensor:
        computed = super().compute_advantages(samples)
        if self.mode == "negated":
            return -computed
        if self.mode == "shuffled":
            return computed[torch.randperm(len(computed), generator=self.shuffler)]
        return computed


def step_record(metrics: dict[str, float]) -> dict[str, float]:
    """What one step's metrics say about climbing: success, unreadable share, each role's first-turn local reward."""
    record = {"success": metrics["rollout/success"], "invalid_move_share": metrics["rollout/invalid_move_share"]}
    for key, value in metrics.items():
        parts = key.split("/")
        if len(parts) == 4 and parts[0] == "rollout" and parts[2:] == ["turn0", "local_reward"]:
            record[f"{parts[1]}/turn0/local_reward"] = value
    return record


def climb(config: LocalTrainConfig, lr: float, steps: int, fresh: bool, mode: AdvantageMode) -> dict[str, Any]:
    """`steps` steps at `lr` from the config's saved model: each step's record."""
    config = dataclasses.replace(config, update=dataclasses.replace(config.update, lr=lr))
    run = FixedTasksRun(config, fresh, mode)
    records = []
    for step in range(steps):
        records.append(step_record(run.train_step(step)))
        print(f"lr {lr:g} {mode}: step {step + 1}/{steps} success {records[-1]['success']:.3f}", flush=True)
    return {"lr": lr, "advantages": mode, "fresh": fresh, "steps": records}


def summary_rows(results: Sequence[dict[str, Any]]) -> list[str]:
    """A markdown table: success and unreadable share over the first and last `BLOCK` steps of each run."""

    def mean(run: dict[str, Any], key: str, block: slice) -> float:
        return statistics.mean(record[key] for record in run["steps"][block])

    lines = [
        f"| lr | advantages | tasks | steps | success, first {BLOCK} -> last {BLOCK} | unreadable, first -> last |",
        "|---|---|---|---|---|---|",
    ]
    first, last = slice(0, BLOCK), slice(-BLOCK, None)
    for run in results:
        tasks = "fresh" if run["fresh"] else "fixed"
        success = f"{mean(run, 'success', first):.3f} -> {mean(run, 'success', last):.3f}"
        unreadable = f"{mean(run, 'invalid_move_share', first):.3f} -> {mean(run, 'invalid_move_share', last):.3f}"
        lines.append(
            f"| {run['lr']:g} | {run['advantages']} | {tasks} | {len(run['steps'])} | {success} | {unreadable} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = probe_parser(MODULE, __doc__, per_rate="run")
    parser.add_argument("--steps", type=int, default=40, help="steps per run (default: %(default)s)")
    parser.add_argument("--tasks", type=int, help="tasks a step (default: the config's tasks_per_step)")
    parser.add_argument("--fresh", action="store_true", help="the next tasks each step, as training does")
    parser.add_argument("--advantages", choices=ADVANTAGE_MODES, default="computed", help="(default: %(default)s)")
    parser.add_argument("--out", type=Path, help="also write the records as JSON here")
    args = parser.parse_args(argv)
    if args.steps < BLOCK:
        parser.error(f"--steps must be >= {BLOCK}, got {args.steps}")
    if args.tasks is not None and args.tasks < 1:
        parser.error(f"--tasks must be >= 1, got {args.tasks}")
    check_rates(parser, args.lr)
    config = read_config(args.config)
    if not config.model.path:
        parser.error(f"{args.config}: its model.path is empty: the probe starts from a saved model")
    if args.tasks is not None:
        config = dataclasses.replace(config, tasks_per_step=args.tasks)
    results = [climb(config, lr, args.steps, args.fresh, args.advantages) for lr in args.lr]
    if args.out:
        write_results(args.out, MODULE, argv, results)
    print("\n".join(summary_rows(results)))


if __name__ == "__main__":
    main()
