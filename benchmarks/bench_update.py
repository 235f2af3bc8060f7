"""Benchmark: the PPO update on real tree-rollout batches, with the K branches' shared prompts run once or per row."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from verl_mas.local.logprob import distinct_prompts
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import LocalRun, make_tasks, sample_advantages
from verl_mas.local.update import PolicyTrainer
from verl_mas.overrides import parse_overrides
from verl_mas.sample import VerlBatchTensors, samples_to_tensors

RESULTS = Path(__file__).parent / "results" / "update.json"
SETUP = ["warm_start.tasks=64", "warm_start.epochs=2", "progress=false", "output_dir=runs/bench_update"]
Batch = tuple[VerlBatchTensors, torch.Tensor]


def collect_batches(run: LocalRun, steps: int) -> list[Batch]:
    """Tensors and token advantages of the first policy's samples, one batch per tree-rollout step."""
    config = run.config
    batches = []
    for step in range(steps):
        tasks = make_tasks(config, "train", step * config.tasks_per_step, config.tasks_per_step)
        samples = [s for r in run.rollout(tasks, run.sampler, config.k, config.rollout_mode) for s in r.samples]
        advantages = sample_advantages(samples, config.grouping, config.norm_adv_by_std)
        rows = [i for i, s in enumerate(samples) if s.policy == samples[0].policy]
        tensors = samples_to_tensors([samples[i] for i in rows], pad_token_id=run.tokenizer.pad_token_id)
        batches.append((tensors, advantages[rows].unsqueeze(-1) * tensors.response_mask))
    return batches


def timed_update(run: LocalRun, batch: Batch, share_prompts: bool) -> tuple[float, list[torch.Tensor]]:
    """Seconds of one PolicyTrainer.step on a fresh copy of the first model, and the parameters it leaves."""
    model = copy.deepcopy(next(iter(run.models.values())))
    trainer = PolicyTrainer(model, dataclasses.replace(run.config.update, share_prompts=share_prompts))
    started = time.perf_counter()
    trainer.step(*batch)
    return time.perf_counter() - started, [p.detach().clone() for p in model.parameters()]


def batch_shape(tensors: VerlBatchTensors) -> dict[str, float]:
    """Rows, distinct prompts, and mean real prompt and response tokens per row."""
    prompt_length = tensors.prompts.shape[1]
    prompt_mask = tensors.attention_mask[:, :prompt_length]
    return {
        "rows": tensors.prompts.shape[0],
        "distinct_prompts": distinct_prompts(tensors.prompts, prompt_mask)[0].shape[0],
        "prompt_tokens": prompt_mask.sum(-1).float().mean().item(),
        "response_tokens": tensors.response_mask.sum(-1).float().mean().item(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=3, help="rollout batches to time the update on")
    parser.add_argument("--repeats", type=int, default=3, help="timings per batch and mode (the median is kept)")
    parser.add_argument("overrides", nargs="*", help="key=value training-config overrides (as for verl-mas train)")
    args = parser.parse_args()
    config = resolve_train_config(parse_overrides(SETUP + args.overrides))
    run = LocalRun(config, log=lambda _: None)
    batches = collect_batches(run, args.batches)
    timed_update(run, batches[0], True)  # warm-up: first-call allocations
    rows = []
    for tensors, advantages in batches:
        seconds: dict[bool, float] = {}
        params: dict[bool, list[torch.Tensor]] = {}
        for share in (False, True):
            timings = []
            for _ in range(args.repeats):
                elapsed, params[share] = timed_update(run, (tensors, advantages), share)
                timings.append(elapsed)
            seconds[share] = statistics.median(timings)
        drift = max((a - b).abs().max().item() for a, b in zip(params[False], params[True], strict=True))
        rows.append(batch_shape(tensors) | {"per_row_s": seconds[False], "shared_s": seconds[True], "drift": drift})
    print(f"{config.env}: {config.tasks_per_step} tasks x K={config.k}, model hidden {config.model.hidden}")
    print(f"{torch.get_num_threads()} threads, torch {torch.__version__}, {platform.machine()}")
    print("rows | distinct prompts | prompt tok | response tok | per-row s | shared s | speed-up | max param diff")
    for r in rows:
        print(
            f"{r['rows']} | {r['distinct_prompts']} | {r['prompt_tokens']:.1f} | {r['response_tokens']:.1f} | "
            f"{r['per_row_s']:.3f} | {r['shared_s']:.3f} | {r['per_row_s'] / r['shared_s']:.2f}x | {r['drift']:.1e}"
        )
    total = sum(r["per_row_s"] for r in rows) / sum(r["shared_s"] for r in rows)
    print(f"update speed-up from shared prompts over {len(rows)} batches: {total:.2f}x")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"overrides": args.overrides, "batches": rows, "speed_up": total}, indent=2))


if __name__ == "__main__":
    main()
