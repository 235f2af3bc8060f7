"""What one update does to what it was given: per role, how the sampled responses' log-probs move by advantage sign.

From a run's saved config (its `model.path`: a warm start), one training rollout of `--tasks` tasks, the advantages
as that config computes them, one update per `--lr` (each from a fresh copy of the same model, on the same samples),
then each sample's summed log-prob again. A step that learns raises the responses it rewards; one that mostly pushes
the penalised ones down moves probability to responses nobody sampled. Also printed: how far the sampler's own
log-probs are from the trainer's on the same tokens (they must agree: the update scores what was sampled).

    .venv/bin/python experiments/update_direction.py runs/code_t2/code/seed1/at_grpo_catch_share/config.json \\
        --lr 3e-5 3e-4 1e-3 --out docs/results/some_folder/update_direction.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from verl_mas.local.config import read_config
from verl_mas.local.train import LocalRun, make_tasks, sample_advantages
from verl_mas.sample import Sample, samples_to_tensors, trainable


def response_logprob_sums(run: LocalRun, samples: Sequence[Sample], rows: Sequence[int], policy: str) -> torch.Tensor:
    """Each of `rows`' summed response log-prob under `policy`'s current weights."""
    tensors = samples_to_tensors([samples[i] for i in rows], pad_token_id=run.tokenizer.pad_token_id)
    return (run.trainers[policy].compute_logprobs(tensors) * tensors.response_mask).sum(-1)


def sampler_gap(run: LocalRun, samples: Sequence[Sample], rows: Sequence[int], policy: str) -> float:
    """The largest |sampler log-prob - trainer log-prob| over `rows`' response tokens."""
    tensors = samples_to_tensors([samples[i] for i in rows], pad_token_id=run.tokenizer.pad_token_id)
    trainer = run.trainers[policy].compute_logprobs(tensors)
    gap = 0.0
    for row, index in enumerate(rows):
        sampled = samples[index].logprobs or ()
        if sampled:
            gap = max(gap, (trainer[row, : len(sampled)] - torch.tensor(sampled)).abs().max().item())
    return gap


def role_rows(samples: Sequence[Sample], advantages: torch.Tensor, moved: torch.Tensor) -> list[dict[str, Any]]:
    """Per role: samples, how many have a positive / negative advantage, the mean log-prob change of each."""
    rows = []
    for role in sorted({s.role for s in samples}):
        picked = [i for i, s in enumerate(samples) if s.role == role]
        up = [moved[i].item() for i in picked if advantages[i] > 0]
        down = [moved[i].item() for i in picked if advantages[i] < 0]
        rows.append(
            {
                "role": role,
                "samples": len(picked),
                "positive": len(up),
                "negative": len(down),
                "mean_change_positive": statistics.fmean(up) if up else None,
                "mean_change_negative": statistics.fmean(down) if down else None,
            }
        )
    return rows


def one_update(config_path: Path, lr: float, tasks: int, out: Path) -> dict[str, Any]:
    """One rollout and one update at `lr` from the saved config's model; the per-role log-prob changes."""
    saved = read_config(config_path)
    config = dataclasses.replace(
        saved,
        update=dataclasses.replace(saved.update, lr=lr),
        policy_lr={},
        output_dir=str(out),
        progress=False,
    )
    run = LocalRun(config, log=lambda line: None)
    played = run.rollout(make_tasks(config, "train", 0, tasks), run.sampler, config.k, config.rollout_mode)
    samples = trainable([s for result in played for s in result.samples])
    advantages = sample_advantages(samples, config.grouping, config.norm_adv_by_std)
    by_policy: dict[str, list[int]] = {}
    for index, sample in enumerate(samples):
        by_policy.setdefault(sample.policy, []).append(index)
    moved = torch.zeros(len(samples))
    gap = 0.0
    for policy, rows in by_policy.items():
        gap = max(gap, sampler_gap(run, samples, rows, policy))
        before = response_logprob_sums(run, samples, rows, policy)
        tensors = samples_to_tensors([samples[i] for i in rows], pad_token_id=run.tokenizer.pad_token_id)
        run.trainers[policy].step(tensors, advantages[rows].unsqueeze(-1) * tensors.response_mask)
        moved[rows] = response_logprob_sums(run, samples, rows, policy) - before
    return {"lr": lr, "tasks": tasks, "sampler_gap": gap, "roles": role_rows(samples, advantages, moved)}


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def report(results: Sequence[dict[str, Any]]) -> str:
    lines = ["| lr | role | samples | adv > 0 | adv < 0 | log-prob change, adv > 0 | adv < 0 |", "|" + "---|" * 7]
    for result in results:
        for row in result["roles"]:
            lines.append(
                f"| {result['lr']:g} | {row['role']} | {row['samples']} | {row['positive']} | {row['negative']} "
                f"| {number(row['mean_change_positive'])} | {number(row['mean_change_negative'])} |"
            )
    gaps = ", ".join(f"{r['lr']:g}: {r['sampler_gap']:.1e}" for r in results)
    return "\n".join(lines) + f"\n\nlargest |sampler - trainer| log-prob per token: {gaps}\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path, help="a run's config.json (its model.path is the starting model)")
    parser.add_argument("--lr", type=float, nargs="+", default=[3e-4], help="one update per rate (default: 3e-4)")
    parser.add_argument("--tasks", type=int, default=8, help="training tasks rolled out (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    parser.add_argument("--scratch", type=Path, default=Path("runs/update_direction"), help="the runs' folder")
    args = parser.parse_args(argv)
    results = [one_update(args.config, lr, args.tasks, args.scratch / f"lr{lr:g}") for lr in args.lr]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        command = "python experiments/update_direction.py " + " ".join(sys.argv[1:] if argv is None else argv)
        args.out.write_text(json.dumps({"command": command, "results": results}, indent=2))
    print(report(results))


if __name__ == "__main__":
    main()
