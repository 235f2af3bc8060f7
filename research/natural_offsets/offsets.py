"""The natural-offsets study: one ordinary AT-GRPO run per environment, keeping each step's group health under
AT-GRPO's grouping and the coarser ones that both engines compute on the same batch.

    python -m research.natural_offsets [--envs NAME ...] [--out DIR]

Each finished run appends one record to DIR/runs.jsonl (an environment recorded there is not run again); copy it to
research/natural_offsets/data/ and `python -m research.figures` redoes the page.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from research.code_tester.code_tester import DEFAULT_OVERRIDES as CODE_TESTER_OVERRIDES
from research.methods import env_config
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import train
from verl_mas.overrides import parse_overrides

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "runs" / "natural_offsets"
RUNS_FILE = "runs.jsonl"
COARSER = ("task", "task_role")
KEPT = ("prompt_offset_share", "mixed_prompt_share", "zero_variance_share", "groups")
# The design (README.md), fixed before the first run: seed 0, 10 AT-GRPO steps, K = 4, 8 tasks a step; the
# evaluation is not an endpoint, so it is kept small.
COMMON = ["seed=0", "steps=10", "k=4", "tasks_per_step=8", "eval_tasks=8", "eval_samples=0", "progress=false"]
# plan_path: the embedded default as it is; code and math: the learning harness's settings for the env (research.
# methods), code with the code_tester study's on top.
ENVS: dict[str, list[str]] = {"plan_path": [], "code": CODE_TESTER_OVERRIDES, "math": []}
HARNESS_ENVS = ("code", "math")


def step_health(row: dict[str, float]) -> dict[str, float]:
    """One step's group health: AT-GRPO's (`group_health/...`) and each coarser grouping's, as `<grouping>/<key>`."""
    kept = {f"task_role_turn/{key}": row[f"group_health/{key}"] for key in KEPT}
    for grouping in COARSER:
        kept |= {f"{grouping}/{key}": row[f"group_health/{grouping}/{key}"] for key in KEPT}
    return kept


def run_overrides(name: str) -> list[str]:
    """The env's keys, then the design's common keys (which win)."""
    return [*ENVS[name], *COMMON]


def run_config(out: Path, name: str) -> LocalTrainConfig:
    overrides = parse_overrides([*run_overrides(name), f"output_dir={out / name}"])
    if name in HARNESS_ENVS:
        return env_config(name, [], overrides, None)
    return resolve_train_config(overrides)


def run_env(out: Path, name: str) -> dict:
    config = run_config(out, name)
    overrides = run_overrides(name)
    started = time.perf_counter()
    summary = train(config, log=print)
    steps = [step_health(row) for row in summary.history if "group_health/groups" in row]
    return {
        "env": name,
        "overrides": overrides,
        "steps": steps,
        "rollout_reward": [row["rollout/reward"] for row in summary.history if "rollout/reward" in row],
        "wall_s": round(time.perf_counter() - started, 1),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def recorded(out: Path) -> set[str]:
    path = out / RUNS_FILE
    return {json.loads(line)["env"] for line in path.read_text().splitlines()} if path.exists() else set()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="*", default=list(ENVS), choices=list(ENVS))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.envs:
        if name in recorded(args.out):
            continue
        record = run_env(args.out, name)
        with (args.out / RUNS_FILE).open("a") as handle:
            handle.write(json.dumps(record) + "\n")
