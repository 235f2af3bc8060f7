"""AT-GRPO on SmolLM2-135M-Instruct: per seed one format tune (the regime study's chosen recipe), every arm's run from
it, held-out success greedy, sampled at the training temperature and sampled at a lower one, before and after.

    python -m research.smollm2_learning [--seeds S ...] [--arms NAME ...] [--out DIR]

Runs checkpoint every 10 steps and resume exactly, so a command stopped part way (a session's end) continues where it
stopped when run again; a finished (seed, arm) in DIR/runs.jsonl is not run again. Copy runs.jsonl to
research/smollm2_learning/data/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from research.smollm2_regime.regime import ARMS as REGIME_ARMS
from research.smollm2_regime.regime import LOW_TEMPERATURE, WARM_START_DIR, sampled_success
from verl_mas.local.callbacks import RunCallbacks
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import LocalRun, train
from verl_mas.overrides import parse_overrides

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "runs" / "smollm2_learning"
RUNS_FILE = "runs.jsonl"
LOW_BEFORE_FILE = "eval_low_before.json"
# The design (README.md), fixed before the first run: the start is the regime study's arm its rule chooses.
RL = ["steps=40", "eval_tasks=64", "eval_samples=1", "eval_every=20", "checkpoint_every=10", "progress=false"]
ARMS: dict[str, list[str]] = {
    "at_grpo": [],
    "at_grpo_again": ["sampler_seed={seed_plus_1000}"],  # the same algorithm, other samples: the noise floor
}


def start_folder(out: Path, seed: int) -> Path:
    return out / f"seed{seed}" / WARM_START_DIR


def start_overrides(start_arm: str) -> list[str]:
    """The preset and the regime arm's tune: what every run of the study starts from."""
    return ["preset=smollm2", *REGIME_ARMS[start_arm]]


def prepare_start(out: Path, seed: int, start_arm: str) -> Path:
    """The seed's tuned model, made once: the regime arm's recipe on this seed's boards, saved with its tokenizer."""
    folder = start_folder(out, seed)
    if (folder / "config.json").is_file():
        return folder
    overrides = [*start_overrides(start_arm), f"seed={seed}", "steps=0", f"output_dir={folder}.run"]
    config = resolve_train_config(parse_overrides(overrides))
    run = LocalRun(config, log=print)
    (model,) = run.models.values()
    # one partial folder per process: two processes reaching one seed at once each save whole, and the first rename
    # wins (the tune is deterministic in the seed, so either is the start)
    partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(str(partial))
    run.tokenizer.save_pretrained(str(partial))
    try:
        partial.rename(folder)
    except OSError:
        if not (folder / "config.json").is_file():
            raise
        shutil.rmtree(partial)
    return folder


class LowTemperatureEval(RunCallbacks):
    """Beside every evaluation, one sampled episode a board at LOW_TEMPERATURE: the sharpening baseline."""

    def __init__(self, folder: Path) -> None:
        self.before_file = folder / LOW_BEFORE_FILE

    def started(self, run, step: int) -> None:
        if step == 0:
            self.before_file.parent.mkdir(parents=True, exist_ok=True)
            self.before_file.write_text(json.dumps(sampled_success(run, LOW_TEMPERATURE)))

    def step_end(self, run, step: int, metrics: Mapping[str, float]) -> Mapping[str, float]:
        if "eval/success" not in metrics:
            return {}
        low = sampled_success(run, LOW_TEMPERATURE)
        return {"eval_low/success": low["success"], "eval_low/invalid_move_share": low["invalid_move_share"]}


def arm_overrides(arm: str, seed: int, arms: Mapping[str, list[str]] = ARMS) -> list[str]:
    """The keys of `arm` (one of `arms`) at `seed`, its placeholders filled."""
    return [value.format(seed_plus_1000=seed + 1000) for value in arms[arm]]


def run_arm(out: Path, seed: int, arm: str, start_arm: str) -> dict:
    start = prepare_start(out, seed, start_arm)
    overrides = [
        *start_overrides(start_arm),
        *RL,
        *arm_overrides(arm, seed),
        f"seed={seed}",
        f"model.path={start}",
        "warm_start.tune_loaded=false",
    ]
    return train_and_record(overrides, out / f"seed{seed}" / arm, seed, arm, start_arm)


def train_and_record(overrides: list[str], folder: Path, seed: int, arm: str, start_arm: str) -> dict:
    """One (seed, arm) run of `overrides` into `folder` (resuming its checkpoints), with the low-temperature reading
    beside every evaluation, as the record the figures read."""
    config = resolve_train_config(parse_overrides([*overrides, f"output_dir={folder}", "resume=true"]))
    started = time.perf_counter()
    summary = train(config, log=print, callbacks=[LowTemperatureEval(folder)])
    history = summary.history
    last = history[-1]
    low_before = json.loads((folder / LOW_BEFORE_FILE).read_text())
    return {
        "seed": seed,
        "arm": arm,
        "overrides": overrides,
        "steps": summary.steps,
        "eval_tasks": config.eval_tasks,
        "greedy": [history[0]["eval/success"], last["eval/success"]],
        "sampled": [history[0]["eval_sampled/success"], last["eval_sampled/success"]],
        f"sampled_t{LOW_TEMPERATURE}": [low_before["success"], last["eval_low/success"]],
        "reward_curve": training_curve(history, "rollout/reward"),
        # descriptive, added after 3 runs: groups whose samples all scored alike train nothing
        "zero_variance_curve": training_curve(history, "rollout/zero_variance_share"),
        "start_arm": start_arm,
        "step_s_median": statistics.median(row["time/step_s"] for row in history if "time/step_s" in row),
        "wall_s_this_command": round(time.perf_counter() - started, 1),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def training_curve(history: Sequence[Mapping[str, float]], key: str) -> list[float]:
    """One training metric per RL step, in order (evaluation-only rows carry none)."""
    return [row[key] for row in history if key in row]


def finished(out: Path) -> set[tuple[int, str]]:
    path = out / RUNS_FILE
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return {(record["seed"], record["arm"]) for record in records}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--start-arm", required=True, choices=list(REGIME_ARMS), help="the regime arm its rule chose")
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        for arm in args.arms:
            if (seed, arm) in finished(args.out):
                continue
            record = run_arm(args.out, seed, arm, args.start_arm)
            with (args.out / RUNS_FILE).open("a") as handle:
                handle.write(json.dumps(record) + "\n")
