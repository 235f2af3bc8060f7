"""The gradient signal measurement: from a fixed warm start, many independent training batches, each rolled out once
and its PPO policy gradient computed under every grouping and tool cost; writes the Gram matrices the page reads.

    OMP_NUM_THREADS=1 python -m research.grouping_signal --seeds 0 1

For each seed: the embedded default's warm start (`research/harness.py`, reused when saved in OUT/seed<S>/warm_start
with the same key), then `--batches` batches of the default's 16 training boards and K = 4 on `plan_path_tool_cost`.
A batch is rolled out once, at cost 0, and its samples rewarded at every cost as the env does (a tool move pays the
cost out of its local reward); on them, the advantages under each grouping as a training step computes them and
`PolicyTrainer.gradient`, the update's gradient at the warm start's weights. The weights never
change. `task_role` and `task_role_turn` take a role's cost out exactly: their advantages are checked equal across
costs and their gradients computed at cost 0 only. It writes OUT/signal.json (`figures.SIGNAL_FILE`): copied into
research/grouping_signal/data/, `python -m research.figures` redoes the page.

`--merge A B` measures nothing: it joins the seeds of A/signal.json and B/signal.json (seeds measured by two
processes at once) into OUT/signal.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers.utils import logging as transformers_logging

from research import harness
from research.grouping.grouping import ENV, PlanPathToolCost, advantage_breakdown
from research.grouping_signal.settings import COSTS, FINE, SIGNAL_FILE, setting_names
from verl_mas.advantage import GROUPINGS
from verl_mas.env import register_env
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.train import LocalRun, make_tasks, sample_advantages
from verl_mas.sample import Sample, samples_to_tensors, trainable

DEFAULT_OUT = harness.REPO / "runs" / "grouping_signal"
COST_FREE = ("task_role", "task_role_turn")  # groupings keyed by role: a role's cost is taken out exactly
ADVANTAGE_TOLERANCE = 1e-4
GRAM_UNITS = 100_000  # Gram entries kept as integers, in units of the warm start's largest ||g||^2 / GRAM_UNITS


def measurement_config(seed: int, warm: Path, out: Path) -> LocalTrainConfig:
    """The embedded default on `plan_path_tool_cost` at cost 0, loading the warm start."""
    default = LocalTrainConfig()
    return dataclasses.replace(
        default,
        env=ENV,
        env_options={**default.env_options, "tool_cost": 0.0},
        seed=seed,
        model=dataclasses.replace(default.model, path=str(warm)),
        output_dir=str(out),
        progress=False,
    )


def at_cost(samples: Sequence[Sample], cost: float) -> list[Sample]:
    """The samples as `plan_path_tool_cost` at `cost` rewards them: a tool move's local reward, and so its mixed
    reward, less the cost (`PlanPathToolCost.step`); nothing else changes."""
    return [
        dataclasses.replace(s, local_reward=s.local_reward - cost, reward=s.reward - cost) if s.role == "tool" else s
        for s in samples
    ]


def batch_gradient(run: LocalRun, samples: list[Sample], advantages: torch.Tensor, cache: dict) -> np.ndarray:
    """The update's gradient on `samples` with `advantages`: every policy's, concatenated in the run's order.

    `cache` keeps each policy's tensors with their on-policy log-probs for the batch (what `step` recomputes)."""
    parts = []
    for policy, trainer in run.trainers.items():
        rows = [i for i, s in enumerate(samples) if s.policy == policy]
        if policy not in cache:
            tensors = samples_to_tensors([samples[i] for i in rows], pad_token_id=run.tokenizer.pad_token_id)
            cache[policy] = dataclasses.replace(tensors, old_log_probs=trainer.compute_logprobs(tensors))
        tensors = cache[policy]
        token_advantages = advantages[rows].unsqueeze(-1) * tensors.response_mask
        parts.append(trainer.gradient(tensors, token_advantages).double().numpy())
    return np.concatenate(parts)


def measure_batch(run: LocalRun, config: LocalTrainConfig, batch: int) -> dict[str, Any]:
    """One batch: one rollout (at cost 0), and per setting (`setting_names`) its gradient and offset share."""
    tasks = make_tasks(config, "train", batch * config.tasks_per_step, config.tasks_per_step)
    results = run.rollout(tasks, run.sampler, config.k, "tree")
    samples_at = {cost: at_cost(trainable([s for r in results for s in r.samples]), cost) for cost in COSTS}
    gradients: dict[str, np.ndarray] = {}
    offsets: dict[str, float] = {}
    largest_change = 0.0
    cache: dict = {}
    for grouping in GROUPINGS:
        advantages = {c: sample_advantages(samples_at[c], grouping, config.norm_adv_by_std) for c in COSTS}
        costs = (COSTS[0],) if grouping in COST_FREE else COSTS
        if grouping in COST_FREE:
            change = max(float((advantages[c] - advantages[COSTS[0]]).abs().max()) for c in COSTS)
            if change > ADVANTAGE_TOLERANCE:
                raise SystemExit(f"research.grouping_signal: batch {batch}: {grouping}'s advantages move with the cost")
            largest_change = max(largest_change, change)
        for cost in costs:
            name = setting_names(grouping, cost)
            gradients[name] = batch_gradient(run, samples_at[cost], advantages[cost], cache)
            offsets[name] = advantage_breakdown(samples_at[cost], advantages[cost].tolist())["offset_share"]
    return {"gradients": gradients, "offsets": offsets, "samples": len(samples_at[0.0]), "change": largest_change}


def gram_record(gradients: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per setting, the Gram matrix of its batch gradients; per coarse setting, its cross products with `FINE`'s
    (rows: the setting's batches, columns: FINE's); all as integers in units of `unit`."""
    grams = {name: g @ g.T for name, g in gradients.items()}
    unit = max(float(np.diag(m).max()) for m in grams.values()) / GRAM_UNITS
    fine = gradients[FINE]
    cross = {name: g @ fine.T for name, g in gradients.items() if name != FINE}
    return {
        "unit": unit,
        "gram": {name: in_units(m, unit) for name, m in grams.items()},
        "cross": {name: in_units(m, unit) for name, m in cross.items()},
    }


def in_units(matrix: np.ndarray, unit: float) -> list[list[int]]:
    return np.rint(matrix / unit).astype(np.int64).tolist()


def measure_seed(seed: int, batches: int, out: Path, log: Callable[[str], None]) -> dict[str, Any]:
    folder = out / f"seed{seed}"
    warm = harness.prepare_warm_start(
        dataclasses.replace(LocalTrainConfig(), seed=seed), "team", folder / "warm_start", log
    )
    if warm.error:
        raise SystemExit(f"research.grouping_signal: the warm start of seed {seed} failed: {warm.error}")
    config = measurement_config(seed, Path(warm.path), folder / "measurement")
    run = LocalRun(config, log)
    started = time.perf_counter()
    rows = []
    for batch in range(batches):
        rows.append(measure_batch(run, config, batch))
        log(f"batch {batch + 1}/{batches}: {rows[-1]['samples']} samples, {time.perf_counter() - started:.0f} s")
    names = list(rows[0]["gradients"])
    gradients = {name: np.stack([row["gradients"][name] for row in rows]) for name in names}
    return {
        "warm_start_s": warm.wall_s,
        "warm_start_reused": warm.reused,
        "measurement_s": time.perf_counter() - started,
        "parameters": int(gradients[FINE].shape[1]),
        "samples": [row["samples"] for row in rows],
        "offset_share": {name: [round(row["offsets"][name], 6) for row in rows] for name in names},
        "largest_cost_free_change": max(row["change"] for row in rows),
        **gram_record(gradients),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m research.grouping_signal",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="warm-start seeds (default: 0 1)")
    parser.add_argument("--batches", type=int, default=64, help="batches per warm start (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: runs/grouping_signal)")
    parser.add_argument("--merge", nargs="+", type=Path, help="join these output folders' seeds; measure nothing")
    args = parser.parse_args(argv)
    if args.batches < 3:
        parser.error("--batches must be at least 3 (the jackknife deletes one)")
    return args


def merged(folders: Sequence[Path]) -> dict[str, Any]:
    """The records of `folders` as one: their seeds together; the batches and costs must agree, a seed must not repeat."""
    records = [json.loads((folder / SIGNAL_FILE).read_text()) for folder in folders]
    joined = {**records[0], "command": " & ".join(r["command"] for r in records), "seeds": {}}
    for folder, record in zip(folders, records, strict=True):
        for key in ("batches", "costs"):
            if record[key] != records[0][key]:
                raise SystemExit(f"research.grouping_signal: {folder}: {key} {record[key]} != {records[0][key]}")
        for seed, result in record["seeds"].items():
            if seed in joined["seeds"]:
                raise SystemExit(f"research.grouping_signal: {folder}: seed {seed} is in two of the records")
            joined["seeds"][seed] = result
    return joined


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.merge:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / SIGNAL_FILE).write_text(json.dumps(merged(args.merge), separators=(",", ":")) + "\n")
        print(f"written: {args.out / SIGNAL_FILE}")
        return
    transformers_logging.disable_progress_bar()
    register_env(ENV)(PlanPathToolCost)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    command = ["python", "-m", "research.grouping_signal", *(sys.argv[1:] if argv is None else argv)]
    record: dict[str, Any] = {
        "command": shlex.join(command),
        "date": datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads",
        "batches": args.batches,
        "costs": list(COSTS),
        "seeds": {},
    }
    for seed in args.seeds:
        record["seeds"][str(seed)] = measure_seed(seed, args.batches, out, harness.prefixed_log(ENV, seed, "signal"))
        # rewritten after every seed, so that a stopped command keeps the seeds it finished
        (out / SIGNAL_FILE).write_text(json.dumps(record, separators=(",", ":")) + "\n")
    print(f"written: {out / SIGNAL_FILE}")
