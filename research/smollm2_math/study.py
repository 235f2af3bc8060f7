"""The real model on easy arithmetic with a worked example: the regime (the untuned team and single agent, held-out
success before any RL) and AT-GRPO's learning from it, both as the page's design fixes them.

    python -m research.smollm2_math regime [--out DIR]
    python -m research.smollm2_math learn [--seeds S ...] [--arms NAME ...] [--out DIR]

`learn` runs the first design's arms unless --arms names others: the second design's local arms are `single_grpo`
(seeds 0-2) and `at_grpo_per_role` (seed 0, the local twin of verl's per_role run).

Regime arms append to DIR/regime.jsonl, learning runs to DIR/runs.jsonl (checkpoints every 10 steps; a run stopped
part way resumes exactly; a finished one is not run again). Copy both into research/smollm2_math/data/.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from research.smollm2_learning.learning import ARMS as LEARNING_ARMS
from research.smollm2_learning.learning import arm_overrides, finished, train_and_record
from research.smollm2_regime.regime import LOW_TEMPERATURE, sampled_success
from verl_mas.dataset import split_tasks
from verl_mas.env import make_env
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import LocalRun
from verl_mas.overrides import parse_overrides

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "runs" / "smollm2_math"
REGIME_FILE = "regime.jsonl"
START = "untuned"  # every run starts from the model as released: no tune, so one start serves every seed and arm
# The design (README.md), fixed before the first run.
EASY_ARITHMETIC = (
    "env_options.source_options={min_terms: 2, max_terms: 2, max_digits: 1, operators: ['+', '-'], "
    "allow_parentheses: false, allow_negation: false}"
)
TASK = [
    "env=math",
    "model.path=smollm2-135m-instruct",
    "warm_start.tune_loaded=false",
    EASY_ARITHMETIC,
    "env_options.brief_prompts=true",
    "env_options.worked_example=true",
    "env_options.max_turns=2",
    "sampling.max_new_tokens=32",
    "k=4",
    "tasks_per_step=4",
    "update.lr=1e-5",
    "update.micro_batch_size=16",
    "eval_tasks=64",
    "eval_samples=1",
    "progress=false",
]
REGIME_ARMS: dict[str, list[str]] = {"team": [], "single": ["env_options.single_agent=true"]}
RL = ["steps=40", "eval_every=20", "checkpoint_every=10"]
# The second design's local arms beside the first's: the single agent with GRPO (K whole episodes a task, one group
# per task) and the local twin of verl's per_role run.
LOCAL_ARMS: dict[str, list[str]] = {
    **LEARNING_ARMS,
    "single_grpo": ["env_options.single_agent=true", "rollout_mode=independent", "grouping=task"],
    "at_grpo_per_role": ["router=per_role"],
}
FIRST_DESIGN_ARMS = tuple(LEARNING_ARMS)
# The second design's verl runs (research.smollm2_math.verl_runs), per router: the arm and its local twin, whose
# overrides are the verl run's config.
VERL_ARMS = {"shared": "verl_shared", "per_role": "verl_per_role"}
VERL_TWINS = {"shared": "at_grpo", "per_role": "at_grpo_per_role"}


def regime_arm(name: str, out: Path) -> dict:
    overrides = [*TASK, *REGIME_ARMS[name], "seed=0", "steps=0", f"output_dir={out / 'regime' / name}"]
    run = LocalRun(resolve_train_config(parse_overrides(overrides)), log=lambda _: None)
    started = time.perf_counter()
    _, metrics = run.evaluate()
    low = sampled_success(run, LOW_TEMPERATURE)
    return {
        "arm": name,
        "overrides": REGIME_ARMS[name],
        "eval_tasks": run.config.eval_tasks,
        "greedy": metrics["eval/success"],
        "sampled": metrics["eval_sampled/success"],
        f"sampled_t{LOW_TEMPERATURE}": low["success"],
        "invalid_greedy": metrics["eval/invalid_move_share"],
        "invalid_sampled": metrics["eval_sampled/invalid_move_share"],
        **answer_baselines(run.config),
        "wall_s": round(time.perf_counter() - started, 1),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def answer_baselines(config) -> dict[str, float]:
    """On the evaluation problems: what copying the worked example's answer solves, and what the most common answer
    solves (chosen on these problems: an upper bound for any one constant answer)."""
    env = make_env(config.env, **config.env_options)
    role = env.workflow().roles[0]
    golds: list[str] = []
    for task in split_tasks(config.env, "eval", config.eval_tasks, config.seed, config.env_options):
        env.reset(task)
        golds.append(env.expert(role))
    example_reply = env.observe(role)[-2]["content"]  # one example for every task of the config
    most_common = max(set(golds), key=golds.count)
    return {
        "copied_answer": golds.count(example_reply) / len(golds),
        "best_constant_answer": golds.count(most_common) / len(golds),
    }


def learning_overrides(seed: int, arm: str) -> list[str]:
    return [*TASK, *RL, *arm_overrides(arm, seed, LOCAL_ARMS), f"seed={seed}"]


def appended(path: Path, record: dict) -> None:
    with path.open("a") as handle:
        handle.write(json.dumps(record) + "\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["regime", "learn"])
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument("--arms", nargs="*", default=list(FIRST_DESIGN_ARMS), choices=list(LOCAL_ARMS))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.part == "regime":
        path = args.out / REGIME_FILE
        done = {json.loads(line)["arm"] for line in path.read_text().splitlines()} if path.exists() else set()
        for name in REGIME_ARMS:
            if name not in done:
                appended(path, regime_arm(name, args.out))
        return
    for seed in args.seeds:
        for arm in args.arms:
            if (seed, arm) not in finished(args.out):
                folder = args.out / f"seed{seed}" / arm
                record = train_and_record(learning_overrides(seed, arm), folder, seed, arm, START)
                appended(args.out / "runs.jsonl", record)
