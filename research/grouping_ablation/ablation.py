"""The grouping ablation's runs (design in README.md): per seed, one warm start per tool-cost level (checked equal
across levels), then the arms of `verl-mas ablate grouping` at each level; each finished arm is added to
data/runs.jsonl at once, so that a run stopped part way keeps what it finished and resumes where it stopped (an arm
with a record is not trained again, even where its run folder is gone)."""

from __future__ import annotations

import argparse
import datetime
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from research.grouping.grouping import ENV, REGIME, PlanPathToolCost
from research.records import RUNS_FILE, RunCurves, read_runs, write_runs
from verl_mas.env import register_env
from verl_mas.local.ablate import plan_ablation
from verl_mas.local.ablate_report import group_health_means
from verl_mas.local.arms import GREEDY, SAMPLED, ArmsPlan, is_finished
from verl_mas.local.reporting import read_metrics
from verl_mas.local.train import train

DATA = Path(__file__).resolve().parent / "data"
LEVELS = (0.0, 2.0)  # the tool cost of each offset level
SEEDS = tuple(range(8))
STEPS = 200
CHECKPOINT_EVERY = 50  # a run stopped between sessions resumes from its last checkpoint (the local engine's is exact)


class WarmStartMismatch(RuntimeError):
    """The two levels' warm starts of one seed differ: the levels would not start from the same model."""


def level_plan(tool_cost: float, seeds: tuple[int, ...], out: Path) -> ArmsPlan:
    """`verl-mas ablate grouping` at one tool cost: the embedded default's settings, on the tool-cost env."""
    overrides: dict[str, Any] = {
        "env": ENV,
        "env_options": {**REGIME, "tool_cost": tool_cost},
        "steps": STEPS,
        "eval_every": STEPS,  # the endpoints are steps 0 and STEPS
        "checkpoint_every": CHECKPOINT_EVERY,
        "progress": False,
        "seeds": list(seeds),
        "output_dir": str(out / f"cost_{tool_cost:g}"),
    }
    return plan_ablation("grouping", overrides)


def warm_start_weights(plan: ArmsPlan, seed: int) -> dict[str, torch.Tensor]:
    folder = Path(plan.warm_start_path(seed))
    found: dict[str, torch.Tensor] = {}
    for file in sorted(folder.rglob("*.safetensors")):
        found |= {f"{file.relative_to(folder)}:{name}": t for name, t in load_file(file).items()}
    return found


def check_same_warm_start(plans: list[ArmsPlan], seed: int) -> None:
    """Every level's warm start of `seed` has the same weights, bit for bit."""
    first, *others = (warm_start_weights(plan, seed) for plan in plans)
    for other in others:
        if first.keys() != other.keys() or any(not torch.equal(first[n], other[n]) for n in first):
            raise WarmStartMismatch(f"seed {seed}: the levels' warm starts differ; the levels would not share a start")


def arm_record(plan: ArmsPlan, tool_cost: float, seed: int, arm: str, wall_s: float) -> RunCurves:
    history = read_metrics(Path(plan.arm_config(seed, arm).output_dir))
    readings = {
        mode: tuple((row["step"], row[key]) for row in history if key in row)
        for mode, key in (("greedy", GREEDY), ("sampled", SAMPLED))
    }
    labels = {
        "tool_cost": tool_cost,
        "group_health": {k: round(v, 5) for k, v in group_health_means(history).items()},
        "wall_s": round(wall_s, 1),
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "command": shlex.join(["python", "-m", "research.grouping_ablation", *sys.argv[1:]]),
    }
    return RunCurves(ENV, arm, seed, readings["greedy"], readings["sampled"], labels)


def recorded(path: Path) -> set[tuple[float, str, int]]:
    """The (tool cost, arm, seed) runs runs.jsonl already holds: finished, even where their run folders are gone."""
    return {(r.labels["tool_cost"], r.method, r.seed) for r in read_runs(path)} if path.exists() else set()


def add_record(path: Path, record: RunCurves) -> None:
    """Add or replace the (tool cost, arm, seed) run in runs.jsonl."""
    key = (record.labels["tool_cost"], record.method, record.seed)
    kept = [r for r in read_runs(path) if (r.labels["tool_cost"], r.method, r.seed) != key] if path.exists() else []
    order = {arm: i for i, arm in enumerate(("task_role_turn", "task_role", "task"))}
    runs = sorted([*kept, record], key=lambda r: (r.labels["tool_cost"], r.seed, order.get(r.method, 9)))
    write_runs(path, runs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m research.grouping_ablation", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("runs/grouping_ablation"), help="the run folders")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the records name it)")
    parser.add_argument("--data", type=Path, default=DATA, help="where runs.jsonl goes")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    register_env(ENV)(PlanPathToolCost)
    plans = [level_plan(cost, tuple(args.seeds), args.out.resolve()) for cost in LEVELS]
    args.data.mkdir(parents=True, exist_ok=True)
    done = recorded(args.data / RUNS_FILE)
    for seed in args.seeds:
        if all((cost, arm, seed) in done for cost in LEVELS for arm in plans[0].arms):
            continue  # a later session need not rebuild the warm starts of a finished seed
        for plan in plans:
            plan.prepare_warm_start(seed, lambda m, s=seed: print(f"[seed {s} warm start] {m}", flush=True))
        check_same_warm_start(plans, seed)
        for cost, plan in zip(LEVELS, plans, strict=True):
            for arm in plan.arms:
                config = plan.arm_config(seed, arm)
                if (cost, arm, seed) in done or is_finished(config):
                    continue  # its record was added when it finished
                start = time.monotonic()
                train(config, log=lambda m, a=arm, s=seed, c=cost: print(f"[cost {c:g} seed {s} {a}] {m}", flush=True))
                add_record(args.data / RUNS_FILE, arm_record(plan, cost, seed, arm, time.monotonic() - start))
