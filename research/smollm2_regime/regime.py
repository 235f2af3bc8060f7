"""The real model's regime study: per arm, the `smollm2` preset's format tune with the arm's overrides, then held-out
success greedy, sampled at the training temperature and sampled at a lower one; the tuned model is saved for the
learning runs that start from it.

    python -m research.smollm2_regime [--arms NAME ...] [--out DIR]      (default: the first design's arms)

Each finished arm appends one record to DIR/runs.jsonl (an arm recorded there is not run again); copy it to
research/smollm2_regime/data/ and `python -m research.figures` redoes the page.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path

from verl_mas.dataset import split_tasks
from verl_mas.env import make_env
from verl_mas.local.generator import BatchingGenerator
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import LocalRun, make_tasks
from verl_mas.metrics import rollout_metrics
from verl_mas.overrides import parse_overrides

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "runs" / "smollm2_regime"
RUNS_FILE = "runs.jsonl"
WARM_START_DIR = "warm_start"
LOW_TEMPERATURE = 0.5  # the sharpening baseline: a sampled gain below this one's level is not learning
# Every arm: the smollm2 preset at seed 0, 64 evaluation boards, one sampled episode a board at each temperature.
COMMON = ["preset=smollm2", "seed=0", "eval_tasks=64", "eval_samples=1", "steps=0", "progress=false"]
EXAMPLE = "env_options.worked_example=true"  # prompts written for this model: one solved turn shown first
# The designs (README.md), each fixed before its first run; a design's rule chooses among its own team arms.
DESIGNS: dict[str, dict[str, list[str]]] = {
    "first": {
        "team_zero_shot": ["warm_start.epochs=0"],
        "team_tune1": ["warm_start.epochs=1"],  # recorded as [] when the preset tuned 1 epoch
        "team_tune3": ["warm_start.epochs=3"],
        "single_tune3": ["warm_start.epochs=3", "env_options.single_agent=true"],
    },
    "second": {
        "team_zero_shot_example": ["warm_start.epochs=0", EXAMPLE],
        "team_tune1_example": ["warm_start.epochs=1", EXAMPLE],
        "team_tune3_example": ["warm_start.epochs=3", EXAMPLE],
    },
}
ARMS: dict[str, list[str]] = {name: arm for design in DESIGNS.values() for name, arm in design.items()}


def copy_baseline(arm: str) -> dict[str, float]:
    """What copying alone reads: on `arm`'s evaluation boards, every role replies the worked example's reply each
    turn (the second design's yardstick, fixed before its first reading)."""
    config = arm_config(arm, DEFAULT_OUT)
    env = make_env(config.env, **config.env_options)
    solved, moves, invalid = 0, 0, 0
    for task in split_tasks(config.env, "eval", config.eval_tasks, config.seed, config.env_options):
        env.reset(task)
        while not env.done:
            for role in env.workflow().roles:
                example_reply = env.observe(role)[-2]["content"]
                result = env.step(role, example_reply)
                moves, invalid = moves + 1, invalid + (not result.valid)
                if env.done:
                    break
        solved += env.success()
    return {"success": solved / config.eval_tasks, "invalid_move_share": invalid / moves}


def arm_config(name: str, out: Path):
    return resolve_train_config(parse_overrides([*COMMON, *ARMS[name], f"output_dir={out / name}"]))


def sampled_success(run: LocalRun, temperature: float) -> dict[str, float]:
    """One independent episode a board at `temperature`, from the evaluator's seed (the greedy tasks, other draws)."""
    sampling = dataclasses.replace(run.config.sampling, temperature=temperature, greedy=False)
    generator = BatchingGenerator(run.served, sampling, seed=run.config.seed + 1)
    tasks = make_tasks(run.config, "eval", 0, run.config.eval_tasks)
    results = run.rollout(tasks, generator, run.config.eval_samples, "independent")
    metrics = rollout_metrics(results, prefix="eval_low")
    return {"success": metrics["eval_low/success"], "invalid_move_share": metrics["eval_low/invalid_move_share"]}


def run_arm(name: str, out: Path) -> dict:
    config = arm_config(name, out)
    lines: list[str] = []
    started = time.perf_counter()
    run = LocalRun(config, log=lines.append)
    tune_s = time.perf_counter() - started
    (model,) = run.models.values()
    folder = out / name / WARM_START_DIR
    model.save_pretrained(str(folder))
    run.tokenizer.save_pretrained(str(folder))
    _, metrics = run.evaluate()
    low = sampled_success(run, LOW_TEMPERATURE)
    return {
        "arm": name,
        "overrides": ARMS[name],
        "common": COMMON,
        "seed": config.seed,
        "eval_tasks": config.eval_tasks,
        "tune_log": [line for line in lines if line.startswith("warm start")],
        "tune_s": round(tune_s, 1),
        "wall_s": round(time.perf_counter() - started, 1),
        "greedy": metrics["eval/success"],
        "sampled": metrics["eval_sampled/success"],
        f"sampled_t{LOW_TEMPERATURE}": low["success"],
        "invalid_greedy": metrics["eval/invalid_move_share"],
        "invalid_sampled": metrics["eval_sampled/invalid_move_share"],
        f"invalid_sampled_t{LOW_TEMPERATURE}": low["invalid_move_share"],
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def recorded(out: Path) -> dict[str, dict]:
    path = out / RUNS_FILE
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return {record["arm"]: record for record in records}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="*", default=list(DESIGNS["first"]), choices=list(ARMS))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.arms:
        if name in recorded(args.out):
            print(f"{name}: recorded already in {args.out / RUNS_FILE}")
            continue
        record = run_arm(name, args.out)
        with (args.out / RUNS_FILE).open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        print(json.dumps(record))
