"""Benchmark: code-mode tree rollouts with the plan agent's replies capped (`sampling.role_max_new_tokens`) vs not."""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch

from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import LocalRun, make_tasks
from verl_mas.overrides import parse_overrides

RESULTS = Path(__file__).parent / "results" / "role_limit.json"
SETUP = ["preset=code_tool", "progress=false", "output_dir=runs/bench_role_limit"]


def measure(config: LocalTrainConfig, steps: int) -> dict[str, float]:
    """Roll out `steps` training batches (no update) and report time, generated tokens and reply lengths."""
    run = LocalRun(config, log=lambda _: None)
    lengths: dict[str, list[int]] = defaultdict(list)
    seconds, solved, episodes = [], 0, 0
    for step in range(steps):
        tasks = make_tasks(config, "train", step * config.tasks_per_step, config.tasks_per_step)
        started = time.perf_counter()
        results = run.rollout(tasks, run.sampler, config.k, config.rollout_mode)
        seconds.append(time.perf_counter() - started)
        solved += sum(r.success for r in results)
        episodes += len(results)
        for sample in (s for r in results for s in r.samples):
            lengths[sample.role].append(len(sample.response_ids))
    return {
        "rollout_s_median": statistics.median(seconds),
        "generated_tokens": run.sampler.stats.generated_tokens,
        "tree_success": solved / episodes,
        **{f"{role}_reply_tokens_mean": statistics.fmean(found) for role, found in sorted(lengths.items())},
        **{f"{role}_reply_tokens_max": max(found) for role, found in sorted(lengths.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cap", type=int, default=64, help="the plan agent's token limit (default: 64, the preset's)")
    parser.add_argument("--steps", type=int, default=2, help="rollout batches per variant (default: 2)")
    parser.add_argument("overrides", nargs="*", help="key=value training overrides; give model.path=<warm start>")
    args = parser.parse_args()
    config = resolve_train_config(parse_overrides([*SETUP, *args.overrides]))

    def plan_limit(limits: dict[str, int]) -> LocalTrainConfig:
        return dataclasses.replace(config, sampling=dataclasses.replace(config.sampling, role_max_new_tokens=limits))

    rows = {
        "uncapped": measure(plan_limit({}), args.steps),
        f"plan capped at {args.cap}": measure(plan_limit({"plan": args.cap}), args.steps),
    }
    (base, base_row), (_, capped_row) = rows.items()
    report = {
        "command": "python benchmarks/bench_role_limit.py "
        + " ".join([f"--cap {args.cap}", f"--steps {args.steps}", *args.overrides]),
        "machine": f"{platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads",
        "setting": f"{config.tasks_per_step} tasks x K={config.k}, {args.steps} batches, model {config.model.path}",
        "rows": rows,
        "rollout_speedup": base_row["rollout_s_median"] / capped_row["rollout_s_median"],
        "token_ratio": capped_row["generated_tokens"] / base_row["generated_tokens"],
    }
    keys = list(base_row)
    print(report["machine"], "|", report["setting"])
    print(f"{'variant':<22}" + "".join(f"{key:>26}" for key in keys))
    for label, row in rows.items():
        print(f"{label:<22}" + "".join(f"{row[key]:>26.3f}" for key in keys))
    speedup, tokens = report["rollout_speedup"], report["token_ratio"]
    print(f"rollout speed-up with the cap: {speedup:.2f}x; tokens generated: {tokens:.2f}x")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
